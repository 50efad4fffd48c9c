"""Model code: HF config parsing, the decoder (Llama, Qwen2, Qwen3), loading of HF-style model directories and
GGUF import (`gguf/`). Attention and the KV storage it reads live in `arbi_grpc/attention/`. Import the submodules
directly (this package root stays torch-free).
"""
