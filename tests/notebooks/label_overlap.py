"""Run a notebook's py:percent source as a script and fail if any figure it shows has text drawn
over other text: two annotations of one axes, or an annotation and the legend.

    python -m tests.notebooks.label_overlap notebooks/compute/roofline.py

Each ``plt.show()`` draws the figure on Agg and compares the window extents (display pixels) of
its texts; prints one line per overlap and exits 1 if there is any, 0 otherwise.
"""

import itertools
import os
import runpy
import sys

os.environ["MPLBACKEND"] = "Agg"
import matplotlib.pyplot as plt  # after the backend is chosen
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


def main(path: str) -> int:
    problems = []

    def show(*args, **kwargs):
        for number in plt.get_fignums():
            problems.extend(overlaps(plt.figure(number)))
        plt.close("all")
    plt.show = show
    runpy.run_path(path, run_name="__main__")
    show()
    for line in problems:
        print(f"{path}: {line}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
