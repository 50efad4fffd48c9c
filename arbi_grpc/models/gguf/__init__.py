"""GGUF import: a GGUF file's metadata, tensors and tokenizer read and written once as the HF-style model directory the
engine loads.
"""
