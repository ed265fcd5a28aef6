"""Keep a command-line option in one piece: ``--inject-dead-how`` in inline code is not broken
after its ``--`` (or at any hyphen) at the end of a line.

A browser may break a line after any hyphen, and in Chinese text, where lines break between any
two characters, an option at the end of a line was often split into ``--`` and the rest. Inline
code that starts with a hyphen and is short (an option, with perhaps its value) gets the class
``option``, which book.css keeps on one line; longer code wraps as before, so that it never
overflows a phone's width.
"""

import re

from mkdocs.plugins import event_priority

MAX_CHARS = 40  # about 60 % of a 390 px phone's line in the code font
_OPTION = re.compile(rf"(?<!<pre>)<code>(-[^<]{{1,{MAX_CHARS - 1}}})</code>")


@event_priority(-50)
def on_post_page(output, page, config):
    return _OPTION.sub(r'<code class="option">\1</code>', output)
