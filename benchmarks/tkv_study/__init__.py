"""The TKV codec study: the scripts behind the quality study of docs/tkv.md, their shared harness, and their
results/."""
