"""Check, file and plot the results files under results/ (the ``--json`` output of the book's
scripts, and figures others published).

    python tools/results.py validate [FILE ...]     every results file (default) against its schema
    python tools/results.py add FILE                a reader's run: validate, name, copy into results/
    python tools/results.py plot BENCHMARK [--out results.png] [FILE ...]

A page shows the plot with ``<!-- results-plot: BENCHMARK -->`` (or a file, or a glob), which the
build inlines as an SVG image (plot_svg, build/hooks/book_markers.py).

Every results file shares an envelope (tools/schemas/envelope.schema.json): ``benchmark`` (the
file stem of the script that wrote it), ``schema_version``, ``origin`` (``measured``, the default,
or ``published``), ``device``, ``date_utc``, ``versions``, ``command`` (measured only) and
``results`` (one flat object per row; a published row carries its ``source`` URL). Each benchmark
adds its own keys in ``tools/schemas/<benchmark>.schema.json`` (JSON Schema 2020-12); a file
whose benchmark has no schema is refused. Adding a benchmark is adding that one file.

Files under results/ that are not results files (README.md, text logs, JSON lines, experiment
records with their own structure) are listed in NOT_RESULTS with the reason.

Exit status: 0 all valid / done, 1 a file is invalid or would be overwritten, 2 usage error.
"""

from __future__ import annotations

import argparse
import glob
import json
import re
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCHEMAS = ROOT / "tools" / "schemas"
RESULTS = ROOT / "results"
PROG = "results.py"

# Files under results/ that are not results JSON, with the reason (README.md files are skipped too).
NOT_RESULTS = {
    "results/storage/import_torch-strace-file-syscalls.txt":
        "strace summary (text) quoted by the Storage chapter",
    "results/training/memory_estimator-h100.txt": "memory_estimator.py's text report",
    "results/training/train_example-cpu-metrics.jsonl":
        "metrics log (JSON lines) read by notebooks/training/training_metrics.py",
    "results/instabilities/loss_spike_experiment.json":
        "experiment record (per-step curves of six training runs, key 'runs') read by "
        "notebooks/instabilities/loss_spike_detection.py; no results rows",
    "results/models/dpo_tiny-cpu.json":
        "experiment record (a DPO training log, key 'log') of scripts/models/dpo_tiny.py; "
        "no results rows",
}


class ResultsError(Exception):
    """A problem with a results file; the message names the file."""


def _rel(path: Path) -> str:
    path = Path(path).resolve()
    try:
        return path.relative_to(ROOT).as_posix()
    except ValueError:
        return str(path)


def known_benchmarks() -> list[str]:
    return sorted(p.name.removesuffix(".schema.json") for p in SCHEMAS.glob("*.schema.json")
                  if p.name != "envelope.schema.json")


def _validator(benchmark: str):
    """A Draft 2020-12 validator for ``benchmark``'s schema, with the envelope registered."""
    from jsonschema import Draft202012Validator
    from referencing import Registry, Resource

    resources = []
    for path in SCHEMAS.glob("*.schema.json"):
        schema = json.loads(path.read_text(encoding="utf-8"))
        resources.append((schema["$id"], Resource.from_contents(schema)))
    registry = Registry().with_resources(resources)
    schema = json.loads((SCHEMAS / f"{benchmark}.schema.json").read_text(encoding="utf-8"))
    return Draft202012Validator(schema, registry=registry)


def load(path: Path) -> dict:
    """The JSON object in ``path``; ResultsError for an unreadable file or another JSON type."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ResultsError(f"{_rel(path)}: cannot read JSON ({err})") from err
    if not isinstance(data, dict):
        raise ResultsError(f"{_rel(path)}: a results file holds a JSON object, not {type(data).__name__}")
    return data


def problems(data: dict, where: str = "file") -> list[str]:
    """Every way ``data`` breaks its benchmark's schema, one line each (empty: valid)."""
    benchmark = data.get("benchmark")
    if not isinstance(benchmark, str):
        return [f"{where}: no 'benchmark' key (the file stem of the script that wrote it)"]
    if not re.fullmatch(r"[a-z][a-z0-9_]*", benchmark) or \
            not (SCHEMAS / f"{benchmark}.schema.json").is_file():
        return [f"{where}: unknown benchmark '{benchmark}' (no tools/schemas/{benchmark}.schema.json; "
                f"known: {', '.join(known_benchmarks())})"]
    errors = sorted(_validator(benchmark).iter_errors(data), key=lambda e: list(map(str, e.absolute_path)))
    return [f"{where}: {'/'.join(map(str, e.absolute_path)) or '(top level)'}: {_short(e.message)}"
            for e in errors]


def _short(message: str, limit: int = 160) -> str:
    """A validator message in one short line (some quote the whole offending value)."""
    message = " ".join(message.split())
    return message if len(message) <= limit else message[:limit - 1] + "…"


def result_files() -> list[Path]:
    """Every results JSON under results/ (not README.md, not the files in NOT_RESULTS)."""
    return sorted(p for p in RESULTS.rglob("*") if p.is_file() and p.name != "README.md"
                  and _rel(p) not in NOT_RESULTS)


def files_of(benchmark: str) -> list[Path]:
    """The results files of ``benchmark`` (by their ``benchmark`` key), measured ones first."""
    docs = {p: load(p) for p in RESULTS.glob(f"*/{benchmark}-*.json") if _rel(p) not in NOT_RESULTS}
    found = [p for p, doc in docs.items() if doc.get("benchmark") == benchmark]
    return sorted(found, key=lambda p: (docs[p].get("origin", "measured") != "measured", p.name))


def validate(paths: list[Path]) -> list[str]:
    errors = []
    for path in paths:
        if path.suffix != ".json":
            errors.append(f"{_rel(path)}: not a results JSON; list it in NOT_RESULTS "
                          "(tools/results.py) with the reason, or remove it")
            continue
        try:
            errors += problems(load(path), _rel(path))
        except ResultsError as err:
            errors.append(str(err))
    return errors


def device_slug(device) -> str:
    """'NVIDIA H100 80GB HBM3' -> 'nvidia-h100-80gb-hbm3'; None (hardware-independent) -> 'any'."""
    if device is None:
        return "any"
    return re.sub(r"[^a-z0-9]+", "-", str(device).lower()).strip("-")[:60] or "unknown"


def part_of(benchmark: str) -> str:
    """The book part whose script wrote ``benchmark`` (scripts/<part>/<benchmark>.py)."""
    found = sorted(ROOT.glob(f"scripts/*/{benchmark}.py"))
    if not found:
        raise ResultsError(f"no scripts/<part>/{benchmark}.py to tell which results/<part>/ it belongs to")
    return found[0].parent.name


def add(path: Path, results_dir: Path = RESULTS) -> Path:
    """Validate a reader's results file and copy it, unchanged, to
    results/<part>/<benchmark>-<device-slug>-<date>.json. Refuses to overwrite."""
    data = load(path)
    errors = problems(data, _rel(path))
    if errors:
        raise ResultsError(errors[0] + (f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""))
    benchmark = data["benchmark"]
    origin = data.get("origin", "measured")
    slug = device_slug(data["device"]) + ("-published" if origin == "published" else "")
    target = results_dir / part_of(benchmark) / f"{benchmark}-{slug}-{data['date_utc'][:10]}.json"
    if target.exists():
        raise ResultsError(f"{_rel(target)} exists; not overwriting it (a second run on the same "
                           "day and device: rename your file's device or date, or compare the two)")
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(path, target)
    return target


def readme_entry(target: Path) -> str:
    """The section to add to results/<part>/README.md for a newly added file."""
    data = load(target)
    versions = ", ".join(f"{k} {v}" for k, v in data.get("versions", {}).items())
    how = (f"```bash\n{data['command']}\n```" if "command" in data else
           "Published figures; the source of each row is in the file.")
    return (f"## `{target.name}`\n\n{how}\n\nMachine: {data['device']} (describe it: CPU, "
            f"GPU count, interconnect, driver, and that it was idle), {versions}, "
            f"{data['date_utc'][:10]}.\n")


# --- plots --------------------------------------------------------------------------------

def _label(data: dict) -> str:
    origin = " (published)" if data.get("origin") == "published" else ""
    return f"{data.get('device') or 'any'}, {data['date_utc'][:10]}{origin}"


def _y(row: dict, keys: list[str]):
    return next((row[k] for k in keys if k in row), None)


def _plot_bars(ax, docs, plot: dict):
    """One bar per device (a published file's rows name their own) and series value: the largest y."""
    best = {}
    for data in docs:
        for row in data["results"]:
            value = _y(row, plot["y"])
            if value is None:
                continue
            label = f"{row['device']} (published)" if data.get("origin") == "published" else _label(data)
            key = (label, row.get(plot.get("series"), "")) if plot.get("series") else (label, "")
            best[key] = max(value, best.get(key, value))
    ax.barh([", ".join(filter(None, key)) for key in best], list(best.values()))
    ax.set_xlabel(plot["ylabel"])
    ax.tick_params(axis="y", labelsize="x-small")
    ax.invert_yaxis()


def _plot_lines(ax, docs, plot: dict):
    """y against x (log2 scale unless ``xscale: linear``), a line per file and series value."""
    for data in docs:
        series = {}
        for row in data["results"]:
            value = _y(row, plot["y"])
            if plot["x"] in row and value is not None:
                series.setdefault(row.get(plot["series"]) if plot.get("series") else None, []).append(
                    (row[plot["x"]], value))
        for name, points in series.items():
            points.sort()
            ax.plot([p[0] for p in points], [p[1] for p in points], marker="o",
                    label=_label(data) + (f", {name}" if name else ""))
        if plot.get("mark"):  # ring the points whose row has a value of that key, and name it
            for row in data["results"]:
                value = _y(row, plot["y"])
                if row.get(plot["mark"]) and plot["x"] in row and value is not None:
                    ax.plot(row[plot["x"]], value, marker="o", markersize=11, fillstyle="none", color="black")
                    ax.annotate(f"{plot['mark']} {row[plot['mark']]}", (row[plot["x"]], value),
                                textcoords="offset points", xytext=(0, 9), ha="center", fontsize="x-small")
    if plot.get("xscale", "log2") == "log2":
        ax.set_xscale("log", base=2)
    ax.set_xlabel(plot["xlabel"])
    ax.set_ylabel(plot["ylabel"])
    ax.legend(fontsize="small")


def _plot_spec(benchmark: str) -> dict:
    from tools import tables

    try:
        spec = tables.benchmark_view(benchmark).get("plot")
    except tables.TableError:
        spec = None
    if spec is None:
        raise ResultsError(f"no plot for '{benchmark}': its view file (tools/schemas/<benchmark>.view.yml) "
                           "has no 'plot'")
    return spec


def _pyplot():
    """matplotlib.pyplot on the Agg backend (files only: no display is needed, none is opened)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _figure(benchmark: str, paths: list[Path] | None, title: bool = True):
    """The matplotlib figure of ``paths`` (default: every results file of ``benchmark``)."""
    spec = _plot_spec(benchmark)
    paths = paths or files_of(benchmark)
    docs = [(p, load(p)) for p in paths]
    wrong = [_rel(p) for p, d in docs if d.get("benchmark") != benchmark]
    if wrong or not docs:
        raise ResultsError(f"no {benchmark} results to plot" if not docs else
                           f"{wrong[0]} is not a {benchmark} results file")
    fig, ax = _pyplot().subplots(figsize=(9, 3 + 0.18 * sum(len(d["results"]) for _, d in docs
                                                         if d.get("origin") == "published")))
    (_plot_bars if spec["kind"] == "bars" else _plot_lines)(ax, [d for _, d in docs], spec)
    if title:
        ax.set_title(f"{benchmark}: {len(docs)} file(s) under results/")
    fig.tight_layout()
    return fig


def plot(benchmark: str, out: Path, paths: list[Path] | None = None) -> Path:
    """One PNG/SVG of every results file of ``benchmark`` (or of ``paths``), drawn as the ``plot``
    of its view file (tools/schemas/<benchmark>.view.yml) says. ResultsError for a benchmark
    without one, another format, or a file of another benchmark."""
    _plot_spec(benchmark)
    if out.suffix not in (".png", ".svg"):
        raise ResultsError(f"{out}: the plot is written as .png or .svg")
    fig = _figure(benchmark, paths)
    fig.savefig(out)
    _pyplot().close(fig)
    return out


def plot_svg(spec: str, lang: str = "en") -> tuple[str, str]:
    """The figure a page's ``<!-- results-plot: SPEC -->`` marker shows, as (SVG text, alt text in
    ``lang``). SPEC is what a results-table marker takes: a benchmark name (every results file of
    it), a glob of results files, or one file, relative to the repository root. The SVG is the
    same for the same files (no date, fixed ids), so the PDF and EPUB caches keep it; its text is
    drawn as paths, so it needs no font where it is shown. ResultsError when SPEC names no results
    file, files of two benchmarks, or a benchmark whose view has no plot or no ``alt``."""
    import io

    from tools.tables import is_results_summary

    if is_results_summary(spec) and "*" not in spec:  # a benchmark's name, as results-table takes it
        benchmark, paths = spec, files_of(spec)
    else:
        paths = [Path(p) for p in sorted(glob.glob(str(ROOT / spec)))] if "*" in spec else [ROOT / spec]
        paths = [p for p in paths if p.is_file()]
        if not paths:
            raise ResultsError(f"no results file matches {spec}")
        benchmark = load(paths[0]).get("benchmark", "")
    alt = _plot_spec(benchmark).get("alt", {}).get(lang)
    if not alt:
        raise ResultsError(f"the plot of '{benchmark}' has no alt text in '{lang}': add plot.alt to "
                           f"tools/schemas/{benchmark}.view.yml")
    plt = _pyplot()
    with plt.rc_context({"svg.hashsalt": "book", "svg.fonttype": "path"}):
        fig = _figure(benchmark, paths, title=False)
        out = io.StringIO()
        fig.savefig(out, format="svg", metadata={"Date": None})
        plt.close(fig)
    return out.getvalue(), " ".join(alt.split())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("validate", help="check results files against their schemas")
    p.add_argument("files", nargs="*", type=Path, help="default: every results file under results/")
    p = sub.add_parser("add", help="validate a results file and copy it into results/<part>/")
    p.add_argument("file", type=Path)
    p = sub.add_parser("plot", help="plot every results file of a benchmark")
    p.add_argument("benchmark")
    p.add_argument("files", nargs="*", type=Path, help="default: every file of the benchmark")
    p.add_argument("--out", type=Path, default=None, help="PNG or SVG (default: BENCHMARK.png)")
    args = parser.parse_args(argv)
    try:
        if args.command == "validate":
            paths = args.files or result_files()
            errors = validate(paths)
            for line in errors:
                print(f"{PROG}: error: {line}", file=sys.stderr)
            if errors:
                return 1
            print(f"{len(paths)} results file(s) valid")
        elif args.command == "add":
            target = add(args.file)
            print(f"added {_rel(target)}\n\nAdd this to results/{target.parent.name}/README.md:\n")
            print(readme_entry(target))
        else:
            out = plot(args.benchmark, args.out or Path(f"{args.benchmark}.png"), args.files)
            print(f"wrote {out}")
    except ResultsError as err:
        print(f"{PROG}: error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
