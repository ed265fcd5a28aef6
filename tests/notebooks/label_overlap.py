"""No figure a notebook shows has text drawn over other text: two annotations of one axes, or an
annotation and the legend. The roofline's labels once overlapped into a smear.

The kernels nbval runs the notebooks in (tests/notebook_kernel.py) call ``check_figures_when_shown``
before the notebook starts: each figure is drawn and the window extents (display pixels) of its
texts compared before it is shown, and a cell whose figure has an overlap fails, naming the texts.
"""

import itertools

from matplotlib.text import Text

TOLERANCE_PX = 1.0  # extents that touch are fine; ink over ink is not


def overlaps(fig) -> list[str]:
    """Pairs of overlapping texts in ``fig``: annotations of one axes with each other and with
    the axes' legend. Returns one description per pair."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    found = []
    for ax in fig.axes:
        # Text's extent, not Annotation's: that one includes the arrow, which may cross a label
        boxes = [(t.get_text(), Text.get_window_extent(t, renderer)) for t in ax.texts
                 if t.get_visible() and t.get_text()]
        legend = ax.get_legend()
        if legend is not None:
            boxes.append(("(legend)", legend.get_window_extent(renderer)))
        for (a, box_a), (b, box_b) in itertools.combinations(boxes, 2):
            if box_a.padded(-TOLERANCE_PX).overlaps(box_b.padded(-TOLERANCE_PX)):
                found.append(f"{ax.get_title() or 'axes'}: {a!r} overlaps {b!r}")
    return found


class LabelOverlap(AssertionError):
    """A figure about to be shown has text drawn over other text."""


def check_figures_when_shown() -> None:
    """In a kernel, before a notebook runs: make the function IPython draws a figure for display
    with (``IPython.core.pylabtools.print_figure``, which ``plt.show()`` and the end of each cell
    reach) raise LabelOverlap, naming the texts, instead of showing text over text; IPython
    reports it as an error output of the cell, and nbval fails the cell."""
    from IPython.core import pylabtools

    drawn = pylabtools.print_figure

    def print_figure(fig, *args, **kwargs):
        found = overlaps(fig)
        if found:
            raise LabelOverlap("text drawn over other text: " + "; ".join(found))
        return drawn(fig, *args, **kwargs)

    pylabtools.print_figure = print_figure
