"""What the build shares (the mkdocs hooks in build/hooks/, build/pdf_book.py and the tests): the
repository root, the marker syntax, the nav and page helpers, and what a script says about itself.
"""

import ast
import re
from pathlib import Path, PurePosixPath

ROOT = Path(__file__).resolve().parents[1]

# A line of a script's summary that shows how to launch it: a launcher followed by an option or a
# path ("torchrun --nproc-per-node 8 x.py", not "torchrun or srun"), `kubectl apply|create` (a
# Kubernetes manifest), a path to a script, or VAR=value before either.
_LAUNCH = re.compile(r"^\s*(\$ )?([A-Z_]+=\S+\s+)*((python3?|torchrun|srun|sbatch|salloc|bash)\s+(-|\S*[/.$])"
                     r"|kubectl\s+(apply|create)\s+-"
                     r"|(scripts/|\./)\S+\.(py|sh|sbatch)\b)")
# A marker is an HTML comment alone on a line (invisible if the hook is absent); see book_markers.py.
MARKER = re.compile(r"^<!-- (embed-script|data-table|results-table|results-plot): (\S+) -->[ \t]*$", re.M)


def nav_sources(items) -> list[str]:
    """Source paths (relative to book/<lang>/) of every page in a mkdocs ``nav``, in order."""
    found = []
    for item in items:
        if isinstance(item, str):
            found.append(item)
        elif isinstance(item, dict):
            for value in item.values():
                found += nav_sources(value) if isinstance(value, list) else [value]
    return found


def page_language(page) -> str:
    """The page's language from its source path (book/<lang>/...)."""
    return PurePosixPath(page.file.src_uri).parts[0]


def site_root_prefix(page) -> str:
    """Relative URL from the page to the site root (``use_directory_urls`` layout)."""
    depth = len([p for p in page.url.split("/") if p])
    return "../" * depth


def strings(config) -> dict:
    """The interface strings of the language being built (``extra.strings`` in mkdocs.yml, set
    per language by mkdocs-static-i18n)."""
    return config.extra["strings"]


def script_summary(path: Path) -> str:
    """What a script says about itself: a Python file's module docstring (purpose, units, how to
    launch it, an example output), or a shell script's leading comment block."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".py":
        return ast.get_docstring(ast.parse(text)) or ""
    lines = text.splitlines()[1:] if text.startswith("#!") else text.splitlines()
    block = []
    for line in lines:
        if not line.startswith("#"):
            break
        block.append(line[1:].removeprefix(" "))
    return "\n".join(block).strip()


def script_purpose(path: Path) -> str:
    """The first paragraph of a script's summary on one line: what the appendix says the script
    is for (in Chinese, its translation: book/zh/appendix/script_summaries.yml)."""
    return script_summary(path).split("\n\n")[0].replace("\n", " ")


def script_usage(path: Path) -> str:
    """The first command in a script's summary that launches it, continuation lines joined and a
    trailing comment dropped ("" when the summary shows none)."""
    lines = script_summary(path).splitlines()
    for number, line in enumerate(lines):
        if _LAUNCH.match(line):
            command = line.strip().removeprefix("$ ")
            while command.endswith("\\") and number + 1 < len(lines):
                number += 1
                command = command[:-1].rstrip() + " " + lines[number].strip()
            return re.sub(r"\s+#.*$", "", command)
    return ""


def script_anchor(rel: str) -> str:
    """The appendix section's id of a script (``scripts/a/b.py`` -> ``script-scripts-a-b-py``)."""
    return "script-" + re.sub(r"[^a-z0-9]+", "-", rel.lower()).strip("-")
