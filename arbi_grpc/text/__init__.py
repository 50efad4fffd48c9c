"""Text around the model: tokenizer, chat template rendering, streaming detokenization and stop strings."""
