"""The model cache: spec resolution, reuse without re-import, re-import on change, listing, races."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from arbi_grpc.errors import InvalidArgumentError, ModelLoadError, NotFoundError
from arbi_grpc.models import model_cache
from arbi_grpc.models.gguf.importer import import_gguf
from arbi_grpc.models.model_cache import (
    DEFAULT_MODEL,
    ResolvedModel,
    default_cache_root,
    list_cached_models,
    pull,
    resolve_model,
)

REPO_ROOT = Path(__file__).resolve().parents[3]


def forbid_import(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(*_args: object) -> None:
        raise AssertionError("the GGUF was imported again")

    monkeypatch.setattr(model_cache, "import_gguf", fail)


def test_default_model_is_reused_without_reimport(
    imported_smollm2: ResolvedModel, smollm2_cache_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    forbid_import(monkeypatch)
    again = resolve_model(DEFAULT_MODEL, cache_root=smollm2_cache_root)
    assert again == imported_smollm2
    assert again.directory.parent == smollm2_cache_root / DEFAULT_MODEL


def test_list_cached_models_reports_the_default_import(imported_smollm2: ResolvedModel, smollm2_cache_root: Path,
                                                       smollm2_gguf_path: Path) -> None:
    (listed,) = [model for model in list_cached_models(smollm2_cache_root) if model.name == DEFAULT_MODEL]
    assert listed.directory == imported_smollm2.directory
    assert listed.source == str(smollm2_gguf_path.resolve())
    assert 530_000_000 < listed.size_bytes < 560_000_000


def test_gguf_path_is_imported_once_under_a_name_from_the_file(
    make_tiny_gguf, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tiny = make_tiny_gguf("My Model.Q8_0.gguf")
    root = tmp_path / "cache"
    first = pull(str(tiny.path), cache_root=root)
    assert first.name == "My-Model.Q8_0"
    assert (first.directory / "config.json").is_file()
    forbid_import(monkeypatch)
    assert resolve_model(str(tiny.path), cache_root=root) == first
    assert resolve_model("My-Model.Q8_0", cache_root=root) == first


def test_import_of_an_older_format_is_rebuilt_with_the_quantized_weights(make_tiny_gguf, tmp_path: Path) -> None:
    from arbi_grpc.models.gguf.importer import PROVENANCE_FILE, QUANTIZED_WEIGHTS_FILE
    from arbi_grpc.models.loader import load_model

    tiny = make_tiny_gguf("m.gguf", quantize_embedding=True)  # a Q8_0 embedding table
    root = tmp_path / "cache"
    first = resolve_model(str(tiny.path), cache_root=root)
    assert (first.directory / QUANTIZED_WEIGHTS_FILE).is_file()
    provenance = json.loads((first.directory / PROVENANCE_FILE).read_text())
    (first.directory / QUANTIZED_WEIGHTS_FILE).unlink()
    (first.directory / PROVENANCE_FILE).write_text(json.dumps({**provenance, "format": 1}))  # as version 1 wrote

    again = resolve_model(str(tiny.path), cache_root=root)

    assert again == first and (again.directory / QUANTIZED_WEIGHTS_FILE).is_file()
    model, _ = load_model(again.directory)  # the Q8_0 table read from the quantized file, dequantized exactly
    assert (model.model.embed_tokens.weight.numpy() == tiny.hf_weights["model.embed_tokens.weight"]).all()


def test_changed_gguf_is_reimported_and_old_import_dropped(make_tiny_gguf, tmp_path: Path) -> None:
    tiny = make_tiny_gguf("m.gguf")
    root = tmp_path / "cache"
    first = resolve_model(str(tiny.path), cache_root=root)
    make_tiny_gguf("m.gguf", layers=3)
    stat = tiny.path.stat()
    os.utime(tiny.path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    second = resolve_model(str(tiny.path), cache_root=root)
    assert second.directory != first.directory and not first.directory.exists()
    assert json.loads((second.directory / "config.json").read_text())["num_hidden_layers"] == 3
    assert [model.directory for model in list_cached_models(root)] == [second.directory]


def test_hf_directory_is_used_in_place(make_tiny_gguf, tmp_path: Path) -> None:
    tiny = make_tiny_gguf()
    import_gguf(tiny.path, tmp_path / "hf-model")
    resolved = resolve_model(str(tmp_path / "hf-model"), cache_root=tmp_path / "cache")
    assert resolved == ResolvedModel("hf-model", (tmp_path / "hf-model").resolve())
    assert not (tmp_path / "cache").exists()


def test_invalid_specs(tmp_path: Path) -> None:
    (tmp_path / "empty-dir").mkdir()
    with pytest.raises(ModelLoadError, match="config.json"):
        resolve_model(str(tmp_path / "empty-dir"), cache_root=tmp_path / "cache")
    (tmp_path / "weights.bin").write_bytes(b"\0" * 16)
    with pytest.raises(InvalidArgumentError, match="not a .gguf"):
        resolve_model(str(tmp_path / "weights.bin"), cache_root=tmp_path / "cache")
    with pytest.raises(NotFoundError, match="no such file"):
        resolve_model(str(tmp_path / "absent.gguf"), cache_root=tmp_path / "cache")
    with pytest.raises(InvalidArgumentError):
        resolve_model("  ", cache_root=tmp_path / "cache")


def test_unknown_name_lists_known_names_and_mentions_paths(tmp_path: Path) -> None:
    with pytest.raises(NotFoundError) as caught:
        resolve_model("gpt-17-ultra", cache_root=tmp_path / "cache")
    message = str(caught.value)
    assert "gpt-17-ultra" in message and DEFAULT_MODEL in message and "path" in message and ".gguf" in message


def test_cache_root_comes_from_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ARBI_CACHE_DIR", str(tmp_path / "elsewhere"))
    assert default_cache_root() == tmp_path / "elsewhere" / "models"
    monkeypatch.delenv("ARBI_CACHE_DIR")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_cache_root() == tmp_path / "home" / ".cache" / "arbi-serve" / "models"


def test_losing_an_import_race_reuses_the_winner(make_tiny_gguf, tmp_path: Path, monkeypatch) -> None:
    tiny = make_tiny_gguf()

    def other_process_wins_then_we_finish(gguf_path: Path, out_dir: Path) -> None:
        import_gguf(gguf_path, out_dir)  # the other process
        import_gguf(gguf_path, out_dir)  # ours, which now finds the directory taken

    monkeypatch.setattr(model_cache, "import_gguf", other_process_wins_then_we_finish)
    resolved = resolve_model(str(tiny.path), cache_root=tmp_path / "cache")
    assert (resolved.directory / "model.safetensors").is_file()
    assert [entry.name for entry in resolved.directory.parent.iterdir()] == [resolved.directory.name]


def test_damaged_cache_entry_is_reported(make_tiny_gguf, tmp_path: Path) -> None:
    tiny = make_tiny_gguf()
    good = resolve_model(str(tiny.path), cache_root=tmp_path / "cache")
    (good.directory / "model.safetensors").unlink()
    with pytest.raises(ModelLoadError, match="delete it and retry"):
        resolve_model(str(tiny.path), cache_root=tmp_path / "cache")


def test_concurrent_processes_import_the_same_gguf_safely(make_tiny_gguf, tmp_path: Path) -> None:
    tiny = make_tiny_gguf(layers=4)
    root = tmp_path / "cache"
    script = (
        "import sys; from pathlib import Path; from arbi_grpc.models.model_cache import resolve_model; "
        "print(resolve_model(sys.argv[1], cache_root=Path(sys.argv[2])).directory)"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    workers = [
        subprocess.Popen([sys.executable, "-c", script, str(tiny.path), str(root)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=env)
        for _ in range(3)
    ]
    results = [worker.communicate(timeout=120) for worker in workers]
    assert [worker.returncode for worker in workers] == [0, 0, 0], [err for _, err in results]
    directories = {out.strip() for out, _ in results}
    assert len(directories) == 1
    (cached,) = list_cached_models(root)
    assert str(cached.directory) in directories
    assert not [entry for entry in cached.directory.parent.iterdir() if entry.name.startswith(".")]


def test_a_cached_import_directory_is_served_under_its_model_name(
    imported_smollm2: ResolvedModel, smollm2_cache_root: Path
) -> None:
    by_path = resolve_model(str(imported_smollm2.directory), cache_root=smollm2_cache_root)
    assert by_path == imported_smollm2
