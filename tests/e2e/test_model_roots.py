"""Admin LoadModel and SwitchModel read models only under the model roots: paths outside them, `..` out of
them and symlinks pointing out are refused with PERMISSION_DENIED (over gRPC too); paths inside, embedded
model names and names of cached imports pass."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from arbi_client import ArbiClient
from arbi_grpc.auth.model_roots import check_model_spec, model_roots
from arbi_grpc.errors import PermissionDeniedError


@pytest.fixture
def roots(tmp_path: Path) -> tuple[Path, ...]:
    (tmp_path / "models" / "inside").mkdir(parents=True)
    (tmp_path / "outside").mkdir()
    (tmp_path / "models" / "link-out").symlink_to(tmp_path / "outside")
    return model_roots(str(tmp_path / "models"))


def test_paths_inside_the_roots_and_model_names_pass(roots: tuple[Path, ...]) -> None:
    check_model_spec(str(roots[0] / "inside"), roots)
    check_model_spec("SmolLM2-135M-Instruct", roots)  # embedded
    check_model_spec("some-earlier-import", roots)  # a cache name, no path


@pytest.mark.parametrize("relative", ["../outside", "inside/../../outside", "link-out", "/etc/passwd",
                                      "missing/../../elsewhere.gguf"])
def test_paths_leaving_the_roots_are_refused(roots: tuple[Path, ...], relative: str) -> None:
    spec = relative if relative.startswith("/") else f"{roots[0]}/{relative}"
    with pytest.raises(PermissionDeniedError, match="outside the model roots"):
        check_model_spec(spec, roots)


def test_default_root_is_the_model_cache(smollm2_cache_root: Path) -> None:
    assert model_roots("") == (smollm2_cache_root.resolve(),)


@pytest.mark.parametrize("call", ["load_model", "switch_model"])
def test_admin_calls_outside_the_roots_get_permission_denied(served_smollm2, tmp_path: Path, call: str) -> None:
    with ArbiClient(served_smollm2.target, admin_token=served_smollm2.credentials.admin_token) as admin:
        with pytest.raises(grpc.RpcError) as refused:
            getattr(admin, call)(str(tmp_path))
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "outside the model roots" in refused.value.details()
    assert served_smollm2.host.readiness()[0]
