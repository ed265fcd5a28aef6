"""build/hooks/notebooks.py puts each plot's alt text, from its code cell's metadata ``alt``, on the
rendered notebook's images, and fails the build where a plot has none (the built site's plots are
checked in test_site.py)."""

import importlib.util

import nbformat
import pytest
from mkdocs.exceptions import PluginError

from tests.build.book import ROOT

_spec = importlib.util.spec_from_file_location("notebooks_hook_for_tests", ROOT / "build" / "hooks" / "notebooks.py")
hook = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(hook)

PNG_A, PNG_B = "iVBORw0KGgoAAAANSUhEUgAAAAE=", "iVBORw0KGgoAAAANSUhEUgAAAAI="
PLACEHOLDER = 'alt="No description has been provided for this image"'


def _notebook(*cells):
    """A notebook of code cells, each given as (alt list or None, [png data, ...])."""
    nb = nbformat.v4.new_notebook()
    for alt, images in cells:
        cell = nbformat.v4.new_code_cell("plt.show()")
        cell.outputs = [nbformat.v4.new_output("display_data", data={"image/png": png + "\n", "text/plain": "<Figure>"})
                        for png in images]
        if alt is not None:
            cell.metadata["alt"] = alt
        nb.cells.append(cell)
    return nb


def _page(*pngs):
    """Images as nbconvert renders them, with its placeholder alt."""
    return "".join(f'<div class="jp-RenderedImage"><img {PLACEHOLDER} class="" src="data:image/png;base64,{png}"/>'
                   f"</div>" for png in pngs)


def test_each_image_gets_its_cells_alt_in_order():
    nb = _notebook((None, []), (['A "first" plot & more', "second"], [PNG_A, PNG_B]), (["third"], [PNG_A]))
    out = hook.set_image_alts('<img src="logo.png" alt="logo">' + _page(PNG_A, PNG_B, PNG_A), nb, "x.ipynb")
    assert "No description" not in out
    assert out.count("alt=") == 4
    assert 'alt="A &quot;first&quot; plot &amp; more" class="" src="data:image/png;base64,' + PNG_A in out
    assert out.index('alt="second"') < out.index('alt="third"')
    assert '<img src="logo.png" alt="logo">' in out  # not an output: left alone


@pytest.mark.parametrize("alt", [None, [], [""]], ids=["no metadata", "empty list", "empty string"])
def test_plot_without_alt_text_fails_naming_the_notebook(alt):
    with pytest.raises(PluginError, match=r"compute/x\.ipynb: image output 1 has no alt text"):
        hook.set_image_alts(_page(PNG_A), _notebook((alt, [PNG_A])), "compute/x.ipynb")


def test_images_that_are_not_the_outputs_fail():
    with pytest.raises(PluginError, match="image 1 of the page is not image output 1"):
        hook.set_image_alts(_page(PNG_B), _notebook((["a"], [PNG_A])), "x.ipynb")
    with pytest.raises(PluginError, match="shows 1 of the notebook's 2 image outputs"):
        hook.set_image_alts(_page(PNG_A), _notebook((["a", "b"], [PNG_A, PNG_B])), "x.ipynb")
