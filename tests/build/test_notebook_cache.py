"""build/hooks/notebooks.py gives mkdocs-jupyter's cache of rendered notebooks one folder per
language, named by the hook's and the converters' versions, so that the English and the Chinese
builds keep their entries instead of deleting each other's (the site's notebook pages themselves
are checked in test_site.py)."""

import importlib.util
from types import SimpleNamespace

from tests.build.book import ROOT

_spec = importlib.util.spec_from_file_location("notebooks_hook_for_cache_tests",
                                               ROOT / "build" / "hooks" / "notebooks.py")
hook = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(hook)


def _config(lang: str, cache: bool = True):
    jupyter = SimpleNamespace(config={"cache": cache, "cache_dir": ".cache/mkdocs-jupyter"},
                              should_include=lambda file: False)
    return {"plugins": {"mkdocs-jupyter": jupyter, "i18n": SimpleNamespace(current_language=lang)}}


class _Config(dict):
    @property
    def plugins(self):
        return self["plugins"]


def test_each_language_caches_in_its_own_folder_and_an_old_version_is_dropped(tmp_path, monkeypatch):
    monkeypatch.setattr(hook, "NOTEBOOK_CACHE", tmp_path)
    stale_en, other_zh = tmp_path / "en-000000000000", tmp_path / "zh-000000000000"
    stale_en.mkdir()
    other_zh.mkdir()
    config = _Config(_config("en"))
    hook.on_files([], config)
    folder = config.plugins["mkdocs-jupyter"].config["cache_dir"]
    assert folder == str(tmp_path / f"en-{hook._CACHE_SALT}")
    assert not stale_en.exists() and other_zh.exists()  # the Chinese build's folder is its own
    off = _Config(_config("en", cache=False))
    hook.on_files([], off)
    assert off.plugins["mkdocs-jupyter"].config["cache_dir"] == ".cache/mkdocs-jupyter"


def test_a_build_evicts_only_unused_entries_of_the_folders_it_used(tmp_path):
    en, zh = tmp_path / "en-x", tmp_path / "zh-x"
    for folder, names in ((en, ("used", "old")), (zh, ("kept",))):
        folder.mkdir()
        for name in names:
            (folder / f"{name}.json").write_text("{}")
    plugin = SimpleNamespace(_used_cache_paths={en / "used.json"})
    hook._evict_unused_of_this_build(plugin, {})
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*.json")) == [
        "en-x/used.json", "zh-x/kept.json"]
