"""Name Material's search dialog (axe-core: aria-dialog-name, serious). Material's search partial
gives the dialog ``role="dialog"`` and no name, so a screen reader announces "dialog" alone; the
name is the language's ``extra.strings.search_dialog`` (mkdocs.yml)."""

import html

from mkdocs.exceptions import PluginError

from tools.book import strings

_DIALOG = '<div class="md-search" data-md-component="search" role="dialog">'


def on_post_page(output, page, config):
    if _DIALOG not in output:
        if 'class="md-search"' in output:  # Material changed its markup: look again
            raise PluginError(f"{page.file.src_uri}: Material's search dialog markup changed; "
                              "update build/hooks/search_dialog.py")
        return output
    name = html.escape(strings(config)["search_dialog"])
    return output.replace(_DIALOG, _DIALOG[:-1] + f' aria-label="{name}">', 1)
