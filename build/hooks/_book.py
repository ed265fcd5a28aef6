"""What the build hooks share: the repository root, the marker syntax, page helpers, and the
repository's ``tools/`` modules imported by file path.

mkdocs loads every hook by its path and puts this folder on ``sys.path`` while it does, so a hook
imports this module with ``import _book``. The ``tools/`` modules are loaded by path too, under
names of our own (``_book_tools_<name>``): an installed package called ``build`` (PyPA's) or
``tools`` cannot shadow them, and no hook edits ``sys.path``.
"""

import importlib.util
import re
import sys
from pathlib import Path, PurePosixPath

ROOT = Path(__file__).resolve().parents[2]

# A marker is an HTML comment alone on a line (invisible if the hook is absent); see book_markers.py.
MARKER = re.compile(r"^<!-- (embed-script|data-table|results-table): (\S+) -->[ \t]*$", re.M)


def tool(name: str):
    """The module ``tools/<name>.py``, loaded once by its path.

    Raises FileNotFoundError when the file does not exist.
    """
    module_name = f"_book_tools_{name}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    path = ROOT / "tools" / f"{name}.py"
    if not path.is_file():
        raise FileNotFoundError(path)
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # dataclasses look their module up while it executes
    spec.loader.exec_module(module)
    return module


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
