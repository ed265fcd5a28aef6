"""build/hooks/search_worker.py: lunr's token-set key in Material's search worker is made
unambiguous (the English search for "NCCL" failed without it; test_search_in_browser.py searches
the built site)."""

import importlib.util

import pytest
from mkdocs.exceptions import BuildError

from tests.build.book import BUILT_PAGES, ROOT

_spec = importlib.util.spec_from_file_location("search_worker_hook", ROOT / "build" / "hooks" / "search_worker.py")
search_worker = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(search_worker)


def test_the_key_gets_a_comma_after_each_id_and_other_code_is_refused(tmp_path):
    worker = tmp_path / "search.x.min.js"
    worker.write_text("a;" + search_worker.KEY + ";b", encoding="utf-8")
    search_worker.mend(worker)
    assert worker.read_text(encoding="utf-8") == "a;" + search_worker.MENDED + ";b"
    with pytest.raises(BuildError, match="is not the code"):
        search_worker.mend(worker)  # mended already: the key is gone


@BUILT_PAGES
def test_the_built_worker_is_mended(built_site):
    (worker,) = built_site.glob("assets/javascripts/workers/search.*.min.js")
    text = worker.read_text(encoding="utf-8")
    assert search_worker.MENDED in text and search_worker.KEY not in text
