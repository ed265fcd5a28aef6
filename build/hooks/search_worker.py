"""Mend lunr's token set in Material's search worker, so that no query fails on the words a page
happens to hold.

lunr (2.3.9, bundled in the worker) builds a trie of every word in the index and merges the nodes
it finds equal by a key made of each edge's character followed by its child's id, with nothing
between them: a node with one edge "1" to node 234 and a node with edges "1" to node 2 and "3" to
node 4 both get the key "01234", so where words hold digits two different nodes can be merged. The
trie then holds words the index lacks, and a search that reaches one fails ("Invalid query",
"Cannot read properties of undefined (reading '_index')"): the English "NCCL" did, once the
Kubernetes page added its words (lunr issue olivernn/lunr.js#503, open). A comma after each id
makes the key unambiguous (an id is digits; a character is one). The build fails if the worker no
longer holds that code, which a new Material version may change: look again then.
"""

from pathlib import Path

from mkdocs.exceptions import BuildError

KEY = "e=e+s+o.id}return e"             # TokenSet.prototype.toString in Material 9.8.1's worker
MENDED = 'e=e+s+o.id+","}return e'


def mend(worker: Path) -> None:
    text = worker.read_text(encoding="utf-8")
    if text.count(KEY) != 1:
        raise BuildError(f"{worker}: lunr's TokenSet.toString is not the code build/hooks/search_worker.py mends")
    worker.write_text(text.replace(KEY, MENDED), encoding="utf-8")


def on_post_build(config):
    workers = sorted(Path(config["site_dir"]).glob("assets/javascripts/workers/search.*.min.js"))
    if not workers:
        raise BuildError("no search worker under assets/javascripts/workers/ to mend")
    for worker in workers:
        mend(worker)
