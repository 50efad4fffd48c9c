"""Import failures: damaged files, unsupported architectures and features, and output that already exists."""

from __future__ import annotations

import random
from pathlib import Path

import gguf
import pytest

from arbi_grpc.errors import InvalidArgumentError, ModelLoadError, UnsupportedArchitectureError
from arbi_grpc.models.gguf.importer import import_gguf


def assert_nothing_left_beside(out: Path) -> None:
    assert not out.exists()
    assert not [entry for entry in out.parent.iterdir() if entry.name.startswith(f".{out.name}.")]


def truncated_copy(source: Path, target: Path, keep: int) -> Path:
    target.write_bytes(source.read_bytes()[:keep])
    return target


def test_truncated_tiny_gguf_raises_model_load_error_naming_file(make_tiny_gguf, tmp_path: Path) -> None:
    tiny = make_tiny_gguf()
    size = tiny.path.stat().st_size
    cuts = [0, 3, 23, 24, 200] + [random.randrange(25, size) for _ in range(6)] + [size - 1]
    for keep in cuts:
        damaged = truncated_copy(tiny.path, tmp_path / f"cut-{keep}.gguf", keep)
        out = tmp_path / f"out-{keep}"
        with pytest.raises(ModelLoadError) as caught:
            import_gguf(damaged, out)
        assert str(damaged) in str(caught.value), keep
        assert_nothing_left_beside(out)


@pytest.mark.slow
def test_truncated_smollm2_raises_model_load_error(smollm2_gguf_path: Path, tmp_path: Path) -> None:
    keep = random.randrange(10_000_000, smollm2_gguf_path.stat().st_size - 1)
    damaged = truncated_copy(smollm2_gguf_path, tmp_path / "smol.gguf", keep)
    with pytest.raises(ModelLoadError, match="truncated or corrupt"):
        import_gguf(damaged, tmp_path / "out")
    assert_nothing_left_beside(tmp_path / "out")


def test_not_a_gguf_and_missing_file(tmp_path: Path) -> None:
    text_file = tmp_path / "notes.gguf"
    text_file.write_text("these are not the weights you are looking for")
    with pytest.raises(ModelLoadError, match="not a GGUF file"):
        import_gguf(text_file, tmp_path / "out")
    with pytest.raises(ModelLoadError, match="cannot read"):
        import_gguf(tmp_path / "absent.gguf", tmp_path / "out")


def test_corrupt_tensor_values_are_detected(make_tiny_gguf, tmp_path: Path) -> None:
    tiny = make_tiny_gguf()
    data = bytearray(tiny.path.read_bytes())
    data[-64:] = b"\xff" * 64  # NaN bit patterns in the last float32 tensor
    tiny.path.write_bytes(bytes(data))
    with pytest.raises(ModelLoadError, match="NaN or infinite"):
        import_gguf(tiny.path, tmp_path / "out")
    assert_nothing_left_beside(tmp_path / "out")


def test_unsupported_architecture(tmp_path: Path) -> None:
    path = tmp_path / "mamba.gguf"
    writer = gguf.GGUFWriter(str(path), "mamba")
    writer.add_block_count(1)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(UnsupportedArchitectureError) as caught:
        import_gguf(path, tmp_path / "out")
    assert caught.value.architecture == "mamba"
    assert caught.value.supported == ("llama", "qwen2", "qwen3")


def test_unsupported_pre_tokenizer_is_a_precise_not_implemented(make_tiny_gguf, tmp_path: Path) -> None:
    tiny = make_tiny_gguf(pre="deepseek-coder")
    with pytest.raises(NotImplementedError, match="pre-tokenizer 'deepseek-coder'"):
        import_gguf(tiny.path, tmp_path / "out")


def test_sentencepiece_tokenizer_is_a_precise_not_implemented(make_tiny_gguf, tmp_path: Path) -> None:
    tiny = make_tiny_gguf(tokenizer_model="llama")
    with pytest.raises(NotImplementedError, match="tokenizer model 'llama'"):
        import_gguf(tiny.path, tmp_path / "out")


def test_merge_outside_vocabulary_is_corrupt(make_tiny_gguf, tmp_path: Path) -> None:
    tiny = make_tiny_gguf(extra_merges=("a b",))
    with pytest.raises(ModelLoadError, match="'a b' uses tokens outside the vocabulary"):
        import_gguf(tiny.path, tmp_path / "out")


def test_missing_metadata_key_names_the_key(tmp_path: Path) -> None:
    path = tmp_path / "bare.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(ModelLoadError, match="tokenizer.ggml.model"):
        import_gguf(path, tmp_path / "out")


def test_existing_output_directory_is_never_overwritten(make_tiny_gguf, tmp_path: Path) -> None:
    tiny = make_tiny_gguf()
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(InvalidArgumentError) as caught:
        import_gguf(tiny.path, out)
    assert caught.value.field == "out_dir"
    assert (out / "keep.txt").read_text() == "mine"


def test_output_created_meanwhile_wins_the_final_rename(make_tiny_gguf, tmp_path: Path, monkeypatch) -> None:
    from arbi_grpc.models.gguf import importer as gguf_import

    tiny = make_tiny_gguf()
    out = tmp_path / "out"
    real_write_weights = gguf_import._write_weights

    def another_import_finishes_first(*args: object) -> None:
        out.mkdir()
        (out / "config.json").write_text("{}")
        real_write_weights(*args)

    monkeypatch.setattr(gguf_import, "_write_weights", another_import_finishes_first)
    with pytest.raises(InvalidArgumentError, match="meanwhile"):
        import_gguf(tiny.path, out)
    assert [entry.name for entry in tmp_path.iterdir() if entry.name.startswith(".out.")] == []
    assert (out / "config.json").read_text() == "{}"
