"""Output constraints with xgrammar: the model's vocabulary as xgrammar sees it (`vocabulary`), constraints as
grammars (`constraint_grammar`, `schema_keywords`), compilation off the engine thread with a cache and a time limit
(`compiler`, `compile_cache`), one matcher per sequence (`matcher`) and each step's token masks (`token_masks`)."""
