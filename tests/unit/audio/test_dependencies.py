"""Without the audio packages or the espeak-ng program, AudioService refuses with FAILED_PRECONDITION
naming what to install."""

from __future__ import annotations

import importlib.util

import pytest

from arbi_grpc.audio import models, phonemes
from arbi_grpc.errors import MissingDependencyError
from arbi_grpc.servicers.status import status_of


def test_a_missing_package_names_the_audio_extra(monkeypatch) -> None:
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(models.importlib.util, "find_spec",
                        lambda name: None if name == "ctranslate2" else real_find_spec(name))
    with pytest.raises(MissingDependencyError) as missing:
        models.check_audio_dependencies()
    assert "pip install 'arbi-serve[audio]'" in str(missing.value) and "ctranslate2" in str(missing.value)
    assert status_of(missing.value).code == 9  # FAILED_PRECONDITION


def test_a_missing_espeak_program_names_the_apt_package(monkeypatch) -> None:
    monkeypatch.setattr(phonemes.shutil, "which", lambda name: None)
    with pytest.raises(MissingDependencyError, match="apt-get install espeak-ng"):
        models.check_audio_dependencies()


def test_models_are_loaded_once_per_process() -> None:
    assert models.process_audio_models() is models.process_audio_models()
