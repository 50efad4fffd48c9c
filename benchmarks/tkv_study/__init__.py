"""The TKV codec study: the scripts behind docs/tkv_study.md, their shared harness, and their results/."""
