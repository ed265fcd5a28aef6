"""Give mkdocs-to-pdf the title, contents heading, build date and file name of the language
being printed, from that language's ``extra.strings`` in mkdocs.yml (the one place for the
book's interface strings). Does nothing in site builds, which have no to-pdf plugin.
"""

import datetime

from mkdocs.exceptions import PluginError
from mkdocs.plugins import event_priority


@event_priority(50)  # before mkdocs-to-pdf reads its options in its own on_config (priority 0)
def on_config(config):
    pdf = config.plugins.get("to-pdf")
    if pdf is None:
        return config
    i18n = config.plugins["i18n"].config
    lang = i18n.build_only_locale
    if not lang:
        raise PluginError("a PDF build prints one language: set plugins.i18n.build_only_locale")
    strings = next(language.extra for language in i18n.languages if language.locale == lang)["strings"]
    pdf.config["cover_title"] = strings["pdf_title"]
    pdf.config["toc_title"] = strings["pdf_contents"]
    pdf.config["cover_subtitle"] = strings["pdf_built_on"].format(date=datetime.date.today().isoformat())
    pdf.config["output_path"] = f"pdf/{strings['pdf_file']}"
    return config
