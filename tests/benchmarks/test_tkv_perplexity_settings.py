"""tkv_perplexity's setting names: KV dtypes, TKV bits, exact windows and bundles, and what the engine gets."""

from __future__ import annotations

from pathlib import Path

import pytest

from arbi_grpc.config import EngineConfig
from benchmarks.tkv_perplexity import Setting


def test_a_tkv_setting_names_its_bits_window_and_bundle() -> None:
    setting = Setting.parse("K4V3-exact4@other", Path("default"))
    assert (setting.kv_cache_dtype, setting.kv_bits, setting.kv_calibration, setting.kv_exact_blocks) == (
        "tkv", "4/3", "other", 4)
    config = setting.engine_config("model", "cpu")
    assert (config.kv_bits, config.kv_exact_blocks, config.dtype) == ("4/3", 4, "float32")


def test_without_a_window_suffix_the_engine_default_applies() -> None:
    setting = Setting.parse("K4V4", Path("bundle-dir"))
    assert setting.kv_exact_blocks is None
    assert setting.kv_calibration == "bundle-dir"
    assert setting.engine_config("model", "cpu").kv_exact_blocks == EngineConfig().kv_exact_blocks


def test_the_bundle_setting_takes_the_bundles_own_bits() -> None:
    setting = Setting.parse("bundle-exact2", Path("dir"))
    assert (setting.kv_bits, setting.kv_exact_blocks) == ("", 2)


def test_plain_dtypes_need_no_bundle() -> None:
    assert Setting.parse("bf16", None).kv_cache_dtype == "bfloat16"


@pytest.mark.parametrize("text", ["K9V4", "K4V4-exact0", "K4V4-window2", "tkv"])
def test_unknown_settings_are_refused(text: str) -> None:
    with pytest.raises(SystemExit, match="expected fp32, bf16, bundle or KxVy"):
        Setting.parse(text, Path("dir"))


def test_a_tkv_setting_without_a_bundle_is_refused() -> None:
    with pytest.raises(SystemExit, match="needs a calibration bundle"):
        Setting.parse("K4V4", None)
