"""Model code: HF config parsing, the decoder (Llama, Qwen2, Qwen3), the paged KV cache and attention backends,
and loading of HF-style model directories. Import the submodules directly (this package root stays torch-free).
"""
