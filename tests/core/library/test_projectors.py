"""A model and its projector are one library entry: paired by folder, name, header and width; never listed alone;
imported and removed together; said by `hearth models show`."""

from __future__ import annotations

import shutil

import pytest

from app.core import paths
from app.core.errors import HearthError
from app.core.library import import_model, list_models, remove_model, resolve
from app.core.library.projectors import is_projector, paired_projector
from tests.helpers.gguf_edit import copy_with_field
from tests.commands.test_cli import hearth


@pytest.fixture
def folder(tmp_path, tiny_media):
    """A download's folder: the tiny Gemma 3 and its projector side by side."""
    made = tiny_media["gemma3"]
    where = tmp_path / "google__gemma-3-tiny"
    where.mkdir()
    shutil.copy(made.model, where / "gemma-3-tiny-F16.gguf")
    shutil.copy(made.mmproj, where / "mmproj-gemma-3-tiny-F16.gguf")
    return where


def test_a_projector_beside_its_model_is_paired_and_one_of_another_width_is_not(folder, tiny_media, bundled_model):
    paired = paired_projector(folder / "gemma-3-tiny-F16.gguf")
    assert paired.path == folder / "mmproj-gemma-3-tiny-F16.gguf"
    assert paired.abilities() == ["sees images"]
    audio = paired_projector(tiny_media["qwen2audio"].model)
    assert audio.abilities() == ["hears audio"]
    # A projector named so, but made for a model 576 wide (SmolLM2's): not this model's.
    other = folder.parent / "other"
    other.mkdir()
    shutil.copy(bundled_model, other / "smollm2.gguf")
    copy_with_field(folder / "mmproj-gemma-3-tiny-F16.gguf", other / "mmproj-smollm2-F16.gguf",
                    "clip.vision.projection_dim", lambda _old: 576)
    assert paired_projector(other / "smollm2.gguf").path.name == "mmproj-smollm2-F16.gguf"
    copy_with_field(folder / "mmproj-gemma-3-tiny-F16.gguf", folder / "mmproj-wide.gguf",
                    "clip.vision.projection_dim", lambda _old: 576)
    assert paired_projector(folder / "gemma-3-tiny-F16.gguf").path.name == "mmproj-gemma-3-tiny-F16.gguf"
    # A file named mmproj that is a text model is no projector.
    shutil.copy(bundled_model, folder / "mmproj-not-really.gguf")
    assert not is_projector(folder / "mmproj-not-really.gguf")
    assert paired_projector(folder / "mmproj-gemma-3-tiny-F16.gguf") is None  # a projector has none of its own


def test_the_models_folder_lists_the_model_with_its_abilities_never_the_projector(folder):
    shutil.copytree(folder, paths.models_dir() / folder.name)
    entries = {e.id: e for e in list_models(discover_others=False)}
    assert "gemma-3-tiny-F16" in entries
    assert not [i for i in entries if "mmproj" in i.lower()]
    entry = entries["gemma-3-tiny-F16"]
    assert entry.abilities == ["sees images"] and entry.projector.endswith("mmproj-gemma-3-tiny-F16.gguf")
    assert entries["SmolLM2-135M-Instruct.Q4_1"].abilities == []


def test_import_brings_the_projector_along_and_rm_removes_the_pair(folder):
    with pytest.raises(HearthError, match="is a projector .* not a model: import the model that lies beside it"):
        import_model(folder / "mmproj-gemma-3-tiny-F16.gguf", "copy")
    entry = import_model(folder / "gemma-3-tiny-F16.gguf", "copy")
    imported = paths.models_dir() / "imported"
    assert sorted(p.name for p in imported.iterdir()) == ["gemma-3-tiny-F16.gguf", "mmproj-gemma-3-tiny-F16.gguf"]
    assert entry.abilities == ["sees images"]
    assert resolve("gemma-3-tiny-F16").projector == str(imported / "mmproj-gemma-3-tiny-F16.gguf")
    removal = remove_model("gemma-3-tiny-F16")
    assert sorted(p.rsplit("/", 1)[-1] for p in removal.deleted) == ["gemma-3-tiny-F16.gguf",
                                                                      "mmproj-gemma-3-tiny-F16.gguf"]
    assert not imported.exists() or not any(imported.iterdir())


def test_rm_keeps_a_projector_another_model_still_pairs_with(folder):
    owned = paths.models_dir() / folder.name
    shutil.copytree(folder, owned)
    shutil.copy(owned / "gemma-3-tiny-F16.gguf", owned / "gemma-3-tiny-Q8_0.gguf")  # a second quant of one repo
    removal = remove_model("gemma-3-tiny-Q8_0")
    assert [p.rsplit("/", 1)[-1] for p in removal.deleted] == ["gemma-3-tiny-Q8_0.gguf"]
    assert (owned / "mmproj-gemma-3-tiny-F16.gguf").exists()


def test_models_show_says_what_the_pair_can_do(folder):
    proc = hearth("models", "show", str(folder / "gemma-3-tiny-F16.gguf"))
    assert proc.returncode == 0, proc.stderr
    assert ("Images, audio:  sees images (projector mmproj-gemma-3-tiny-F16.gguf, loaded with the model)"
            in proc.stdout)
