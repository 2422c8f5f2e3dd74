"""``gpucontrol calibrate``: fit the simulated plant to measured experiment records.

Reads the per-period CSVs that ``knobs``, ``identify``, ``burst`` or ``sweep`` wrote (on the
GPU or on a simulated plant), turns their steady periods into facts — mean latency and
training SM share per operating point (:func:`harness.sim.calibration.facts_from_records`) — and
fits the sharing constants of a preset to them (:func:`harness.sim.calibration.calibrate`).

Written to ``<out>/``: ``calibration.json`` (base preset, fitted overrides, the fit, the
sources, per-fact measured vs model values; ``--preset <out>/calibration.json`` on any
experiment runs the calibrated plant), ``calibration.md`` (the same as tables) and
``calibration.png`` (measured vs model per fact).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from harness.results import (
    atomic_write_text,
    markdown_table,
    result_set,
    save_figure,
    write_json,
)
from harness.sim.calibration import calibrate, facts_from_records, find_records
from harness.sim.simulated import PRESETS, base_preset_name

__all__ = ["FILES", "format_report", "has_stderr", "mixed_presets", "no_stderr_reason",
           "per_source", "pin_text", "plot_calibration", "run_calibration", "unpinned"]


#: The files a calibration writes into its folder (which may hold others: they are kept).
FILES = ("calibration.json", "calibration.md", "calibration.png")


#: The options of :func:`run_calibration` that reading the records takes.
_READ_OPTIONS = ("settle_periods", "sleep_bin_s", "min_periods", "sm_weight", "its_weight")


def _check_sources(sources: Sequence[str], flag: str, options: Mapping[str, Any],
                   seen: dict[Path, str]) -> None:
    """Read each source alone before fitting, and refuse one that is unusable — missing,
    empty (a file with no period, a header alone), not an experiment's records, or holding a
    damaged or out-of-range row — naming the flag it came with (``--from`` or ``--check``)
    and the source: what is wrong is the file, whatever the preset. Records that an earlier
    source holds too (a folder and its subfolder) are refused: counted twice, they would
    shrink the standard errors by 1/sqrt(2), and checked after being fitted they are not
    held out."""
    for src in sources:
        try:
            recs = find_records(src)
            if not any(rec.rows for rec in recs):
                raise ValueError(f"source {src!r}: no periods in it (an empty file, or a "
                                 f"header alone); give the per-period CSV or the results "
                                 f"folder of a knobs, identify, burst or sweep run")
            for rec in recs:
                where = rec.csv.resolve()
                if where in seen:
                    raise ValueError(f"source {src!r}: {str(rec.csv)!r} is already read from "
                                     f"{seen[where]}; give each record once")
                seen[where] = f"{flag} {src}"
            facts_from_records([src], **options)
        except ValueError as exc:
            raise ValueError(f"{flag}: {exc}") from None
        except OSError as exc:
            raise ValueError(f"{flag}: {exc.filename or src}: {exc.strerror or exc}"
                             ) from None


def _infer_preset(sources: Sequence[str]) -> str:
    """The one named preset the sources' experiments ran with."""
    names = set()
    for src in sources:
        for rec in find_records(src):
            p = rec.meta.get("preset")
            if p is not None:
                try:
                    names.add(base_preset_name(str(p)))
                except ValueError:
                    names.add(str(p))
    if len(names) != 1 or next(iter(names)) not in PRESETS:
        raise ValueError(f"preset must be given (--preset, one of {sorted(PRESETS)} or a "
                         f"calibration.json): the sources ran with "
                         f"{sorted(names) if names else 'no recorded preset'}")
    return next(iter(names))


def run_calibration(sources: Sequence[str | Path], out_dir: str | Path,
                    preset: str | None = None, **kw: Any) -> tuple[dict[str, Any], list[Path]]:
    """Calibrate (``preset`` None: the one the sources ran with) and write calibration.json,
    calibration.md and calibration.png into ``out_dir``. Returns the document and the files."""
    srcs = [str(s) for s in sources]
    read = {k: kw[k] for k in _READ_OPTIONS if k in kw}
    seen: dict[Path, str] = {}
    _check_sources(srcs, "--from", read, seen)
    _check_sources([str(s) for s in kw.get("check") or ()], "--check", read, seen)
    doc = calibrate(srcs, preset if preset is not None else _infer_preset(srcs), **kw)
    out = Path(out_dir)
    with result_set(out, owns=FILES):  # ours replace the previous run's; the rest stays
        files = [write_json(doc, out / "calibration.json"),
                 atomic_write_text(out / "calibration.md", format_report(doc, out)),
                 plot_calibration(doc, out / "calibration.png")]
    return doc, files


#: A fitted constant whose standard error exceeds this fraction of its value is reported as
#: not pinned by the data.
UNPINNED_REL = 0.5


def _no_stderr(err: Any) -> bool:
    return err is None or (isinstance(err, float) and math.isnan(err))


def has_stderr(doc: Mapping[str, Any], name: str) -> bool:
    """Whether the fitted constant ``name`` has a standard error (see :func:`unpinned`)."""
    return not _no_stderr(doc["fitted"][name].get("stderr"))


def unpinned(doc: Mapping[str, Any]) -> list[str]:
    """The fitted constants the data cannot pin: standard error above
    :data:`UNPINNED_REL` of the value, infinite, or none at all (a fit with no more measured
    quantities than fitted constants has no residual to estimate it from).

    Parameters
    ----------
    doc : Mapping
        The calibration document (``calibration.json``).

    Returns
    -------
    list[str]
        Field names, in the document's order.
    """
    out = []
    for n, f in doc["fitted"].items():
        err, v = f.get("stderr"), f.get("value")
        if v is None:
            continue
        if _no_stderr(err) or not math.isfinite(err) or err > UNPINNED_REL * abs(v):
            out.append(n)
    return out


def pin_text(doc: Mapping[str, Any], name: str) -> str:
    """``"value ± std. error"`` of a fitted constant, or ``"value (no standard error)"``.

    Parameters
    ----------
    doc : Mapping
        The calibration document.
    name : str
        A field of ``doc["fitted"]``.

    Returns
    -------
    str
        The text.
    """
    f = doc["fitted"][name]
    if not has_stderr(doc, name):
        return f"{f['value']:.4g} (no standard error)"
    return f"{f['value']:.4g} ± {f['stderr']:.4g}"


def _rms(values: Sequence[float | None]) -> float:
    v = np.array([np.nan if x is None else x for x in values], float)
    v = v[np.isfinite(v)]
    return float(np.sqrt(np.mean(v ** 2))) if v.size else math.nan


def per_source(doc: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The fit source by source: RMS latency and SM-share errors of the base preset and of
    the calibrated plant over each source's facts. An overall RMS that improves can hide a
    source the calibration fits worse than the preset did (records of another preset, or of
    another machine, pulling the constants their way): this shows it.

    Parameters
    ----------
    doc : Mapping
        The calibration document.

    Returns
    -------
    list of dict
        One row per source: ``source``, ``preset``, ``facts``, ``latency_rms_base``,
        ``latency_rms``, ``sm_rms_base``, ``sm_rms`` (percent; NaN where none measured).
    """
    rows = []
    for src in doc["sources"]:
        facts = [f for f in doc["facts"]
                 if f.get("source") == src["path"] and f.get("fitted", True)]
        rows.append({"source": src["path"], "preset": src.get("preset"),
                     "ran_on": ran_on(src), "facts": len(facts),
                     "latency_rms_base": _rms([f["base_latency_err_pct"] for f in facts]),
                     "latency_rms": _rms([f["latency_err_pct"] for f in facts]),
                     "sm_rms_base": _rms([f.get("base_sm_err_pct") for f in facts]),
                     "sm_rms": _rms([f.get("sm_err_pct") for f in facts])})
    return rows


def ran_on(src: Mapping[str, Any]) -> str:
    """What a source's records ran on, in words: a simulated preset, or the hardware (set up
    as a preset, where the experiment names one)."""
    plant, preset = src.get("plant"), src.get("preset")
    if plant == "sim":
        return f"simulated {preset}" if preset else "simulated"
    where = "GPU" if plant in (None, "gpu", "gpu-green") else str(plant)
    return f"{where}, set up as {preset}" if preset else where


def mixed_presets(doc: Mapping[str, Any]) -> list[str]:
    """Simulated sources whose experiments ran on another named preset than the one
    calibrated: two simulated presets are two plants, and the fit then compromises between
    them. (On a GPU the preset names only the setup -- the batch, the MPS levels -- of one
    machine, whose records of both presets belong together.)

    Parameters
    ----------
    doc : Mapping
        The calibration document.

    Returns
    -------
    list of str
        ``"PATH (PRESET)"`` per such source.
    """
    base = doc["base_preset"]
    return [f"{s['path']} ({s['preset']})" for s in doc["sources"]
            if s.get("plant") == "sim" and s.get("preset") in PRESETS
            and s.get("preset") != base]


def no_stderr_reason(doc: Mapping[str, Any]) -> str:
    """Why a fit has no standard errors: too few measured quantities for its constants."""
    fit = doc["fit"]
    return (f"{fit['residuals']} measured quantities for {fit['fields']} fitted constants "
            f"leave no residual to estimate it from")


def format_report(doc: Mapping[str, Any], out_dir: str | Path | None = None) -> str:
    """calibration.md: sources, fitted constants, per-fact table, how to use the result."""
    s = doc["summary"]
    lines = [f"# Simulated plant calibrated from measurements (base preset `{doc['base_preset']}`)",
             ""]
    if doc["started_from"] != doc["base_preset"]:
        lines += [f"Started from `{doc['started_from']}`.", ""]
    lines += ["## Sources", "",
              markdown_table(doc["sources"], ("path", "experiment", "plant", "preset", "periods",
                                              "restarting", "settling", "thin", "used", "facts"),
                             digits=0),
              (f"Steady periods: not restarting, not within {doc['options']['settle_periods']} "
               f"periods of a run start, knob change or restart; operating points with fewer "
               f"than {doc['options']['min_periods']} periods are dropped (`thin`); excited "
               f"sleeps binned by {doc['options']['sleep_bin_s']:g} s; SM weight "
               f"{doc['options']['sm_weight']:g}."), "",
              "## Fitted constants", ""]
    loose = unpinned(doc)
    rows = [{"field": n, "base": f["start"], "fitted": f["value"], "stderr": f["stderr"],
             "change_pct": f"{f['change_pct']:+.1f}" if f["change_pct"] is not None
             and math.isfinite(f["change_pct"]) else "—",
             "note": "; ".join(x for x in (f"at bound {f['bounds']}" if f["at_bound"] else "",
                                           "not pinned by these data" if n in loose else "")
                               if x)}
            for n, f in doc["fitted"].items()]
    lines.append(markdown_table(rows, ("field", "base", "fitted", "stderr", "change_pct",
                                       "note"),
                                ("field", "base", "fitted", "± std. error", "change %", "note"),
                                digits=4))
    if loose:
        none = not all(has_stderr(doc, n) for n in loose)
        lines += [("**Warning**: the data cannot pin "
                   + ", ".join(f"{n} = {pin_text(doc, n)}" for n in loose)
                   + f": the standard error exceeds {100 * UNPINNED_REL:g} % of the value"
                   + (f" or there is none ({no_stderr_reason(doc)})" if none else "")
                   + ", so the fitted number is one of many that fit equally well. Record "
                   "operating points that move it (other MPS levels, sleeps or batches) or "
                   "leave it out of --fit."), ""]
    if doc["undetermined"]:
        lines += [(f"Not determined by these facts (left at the base): "
                   f"{', '.join(doc['undetermined'])}."), ""]
    if doc.get("setup"):
        lines += ["Set up from the records (not fitted):", "",
                  markdown_table([{"field": k, **v} for k, v in doc["setup"].items()],
                                 ("field", "value", "how", "source"), digits=4), ""]
    fit = doc["fit"]
    sm = (f"Training SM share error, RMS: base {s['sm_err_pct_rms_base']:.2f} %, calibrated "
          f"{s['sm_err_pct_rms']:.2f} %." if math.isfinite(s["sm_err_pct_rms"])
          else "No SM shares fitted.")
    its = s.get("its_err_pct_rms", math.nan)
    sm += (f" Training rate error, RMS (max): base {s['its_err_pct_rms_base']:.2f} % "
           f"({s['its_err_pct_max_base']:.2f} %), calibrated {its:.2f} % "
           f"({s['its_err_pct_max']:.2f} %)." if math.isfinite(its) else
           " No training rates fitted.")
    lines += [(f"{fit['facts']} facts, {fit['residuals']} measured quantities, "
               f"{fit['fields']} fitted constants; least squares: {fit['message']}"), "",
              (f"Latency error over the facts, RMS (max): base preset "
               f"{s['latency_err_pct_rms_base']:.2f} % ({s['latency_err_pct_max_base']:.2f} %), "
               f"calibrated {s['latency_err_pct_rms']:.2f} % ({s['latency_err_pct_max']:.2f} %). "
               + sm), "",
              "## Fit per source", "",
              markdown_table(per_source(doc), (
                  "source", "ran_on", "facts", "latency_rms_base", "latency_rms",
                  "sm_rms_base", "sm_rms"),
                  ("source", "ran on", "facts", "latency err RMS %, base",
                   "latency err RMS %, calibrated", "SM err RMS %, base",
                   "SM err RMS %, calibrated"), digits=2), ""]
    mixed = mixed_presets(doc)
    if mixed:
        lines += [(f"**Warning**: {', '.join(mixed)} ran on another simulated preset than "
                   f"`{doc['base_preset']}`, a plant with other constants: its facts pull the "
                   "fit towards that plant, and a source fitted worse than by the base preset "
                   "above is the cost. Calibrate each preset from its own records."), ""]
    lines += ["## Facts: measured vs model", "",
              markdown_table([f for f in doc["facts"] if f.get("fitted", True)], (
                  "case", "periods", "measured_latency_ms", "base_latency_ms",
                  "base_latency_err_pct", "latency_ms", "latency_err_pct", "measured_sm_pct",
                  "base_sm_pct", "sm_pct", "measured_its", "its", "its_err_pct"),
                  ("operating point", "periods", "measured ms", "base ms", "base err %",
                   "calibrated ms", "calibrated err %", "measured SM %", "base SM %",
                   "calibrated SM %", "measured it/s", "calibrated it/s",
                   "calibrated it/s err %"), digits=2)]
    checked = [f for f in doc["facts"] if not f.get("fitted", True)]
    if checked:
        c = doc["check_summary"]
        lines += ["", "## Checked, not fitted", "",
                  (f"Records given with --check ({', '.join(doc['options']['check'])}): the "
                   f"calibrated model's latency error RMS {c['latency_err_pct_rms']:.2f} % "
                   f"(max {c['latency_err_pct_max']:.2f} %), base preset "
                   f"{c['latency_err_pct_rms_base']:.2f} %."), "",
                  markdown_table(checked, (
                      "case", "periods", "measured_latency_ms", "latency_ms",
                      "latency_err_pct", "measured_its", "its", "its_err_pct"),
                      ("operating point", "periods", "measured ms", "calibrated ms",
                       "err %", "measured it/s", "calibrated it/s", "it/s err %"),
                      digits=2)]
    notes = sorted({f["its_note"] for f in doc["facts"] if f.get("its_note")
                    and not f["its_note"].startswith("1 / (")})
    rated = [f["case"] for f in doc["facts"] if str(f.get("its_note", "")).startswith("1 / (")]
    if rated:
        lines += ["", ("Training rate at a sleep, from the spatial study's iterations: "
                       "1 / (iteration + sleep), because the GPU harness's count drops the "
                       "iterations that end within the sleep of a period's end ("
                       + "; ".join(f"{f['case']}: counted {f['its_counted']:.3f} it/s"
                                   for f in doc["facts"] if f["case"] in rated) + ").")]
    lines += [f"\nTraining rate {n}." for n in notes]
    path = Path(out_dir) / "calibration.json" if out_dir is not None else "calibration.json"
    lines += [("Run an experiment on the calibrated plant with "
               f"`gpucontrol burst --plant sim --preset {path}` (any experiment takes "
               "`--preset`)."), ""]
    return "\n".join(lines)


def _fact_rows(facts: Sequence[Mapping[str, Any]]) -> tuple[np.ndarray, int]:
    """Each fact's row, counted up from the bottom, and the number of rows: a blank row above
    each source's first fact holds the source's label, so that it covers no marker."""
    pos: list[int] = []
    last: object = object()
    for f in facts:
        if f.get("source") != last:
            last = f.get("source")
            pos.append((pos[-1] if pos else -1) + 2)  # the label's row, then the fact's
        else:
            pos.append(pos[-1] + 1)
    rows = (pos[-1] + 1) if pos else 0
    return rows - 1 - np.array(pos, float), rows


def band_label(source: str | Path) -> str:
    """A source's name in the figure: the file and its folder (two spatial studies both
    write levels.csv: ``spatial/levels.csv``, ``spatial_mps/levels.csv``)."""
    return "/".join(Path(source).parts[-2:])


def _source_bands(doc: Mapping[str, Any], ax: Any, y: np.ndarray) -> None:
    """Shade every other source's facts and write each source's fit in the blank row above
    them."""
    facts = doc["facts"]
    for i, src in enumerate(per_source(doc)):
        rows = [k for k, f in enumerate(facts) if f.get("source") == src["source"]]
        if not rows:
            continue
        top, bottom = y[rows[0]] + 1.5, y[rows[-1]] - 0.5
        for a in ax:
            if i % 2:
                a.axhspan(bottom, top, color="0.94", zorder=0)
        fit = (f"RMS {src['latency_rms_base']:.1f} % -> {src['latency_rms']:.1f} %"
               if src["facts"] else "checked, not fitted")
        ax[0].text(0.99, top - 0.5, f"{band_label(src['source'])} (ran on {src['ran_on']}): "
                   + fit,
                   transform=ax[0].get_yaxis_transform(), ha="right", va="center", fontsize=8,
                   color="tab:blue" if not src["latency_rms"] > src["latency_rms_base"]
                   else "tab:red")


def plot_calibration(doc: Mapping[str, Any], path: str | Path) -> Path:
    """Per fact, grouped by source: the latency error of the base preset and of the
    calibrated plant against the measurement, in percent (left; a 5 ms and a 100 ms
    operating point on one scale, each source banded with its RMS before -> after), then the
    training SM share and the training rate, measured, base and calibrated, where measured
    (the facts of ``--check`` records labelled so)."""
    import matplotlib.pyplot as plt

    facts = doc["facts"]
    y, n = _fact_rows(facts)

    def col(key: str) -> np.ndarray:
        return np.array([np.nan if f.get(key) is None else f[key] for f in facts], float)

    def measured(key: str) -> bool:
        return bool(np.isfinite(col(key)).any())

    panels = [(k, u) for k, u in (("sm_pct", "training SM share (%)"),
                                  ("its", "training iterations/s")) if measured(f"measured_{k}")]
    height = 2.0 + 0.28 * n
    fig, axes = plt.subplots(1, 1 + len(panels), figsize=(8 + 4 * len(panels), height),
                             sharey=True, squeeze=False,
                             gridspec_kw={"width_ratios": [3] + [2] * len(panels)})
    ax = axes[0]
    base = f"preset {doc['base_preset']}"
    ax[0].axvline(0.0, color="k", lw=0.8)
    ax[0].plot(col("base_latency_err_pct"), y, "x", color="tab:grey", ms=6, label=base)
    ax[0].plot(col("latency_err_pct"), y, "s", color="tab:blue", mfc="none", ms=7,
               label="calibrated")
    ax[0].set_xlabel("latency error of the model vs the measurement (%)")
    for a, (what, unit) in zip(ax[1:], panels):
        for prefix, color, mark, label in (("measured_", "k", "o", "measured"),
                                           ("base_", "tab:grey", "x", base),
                                           ("", "tab:blue", "s", "calibrated")):
            a.plot(col(f"{prefix}{what}"), y, mark, color=color, ms=7 if mark == "s" else 5,
                   mfc="none" if mark == "s" else color, label=label)
        if what == "its":
            counted, shown = col("its_counted"), col("measured_its")
            off = np.isfinite(counted) & ~np.isclose(counted, shown, rtol=0.01)
            if off.any():
                a.plot(counted[off], y[off], "v", color="tab:red", ms=5, mfc="none",
                       label="counted by the GPU harness (sleep rows)")
        a.set_xlabel(unit)
    for a in ax:
        a.grid(axis="x", lw=0.3)
    _source_bands(doc, ax, y)
    ax[0].set_yticks(y, [("check, not fitted: " if not f.get("fitted", True) else "")
                         + f["case"] for f in facts], fontsize=7)
    ax[0].set_ylim(-0.6, n - 0.4)
    for a in ax:  # above the panels, where they cover no marker
        a.legend(fontsize=7, loc="lower left", bbox_to_anchor=(0.0, 1.0), ncol=2,
                 borderaxespad=0.2, frameon=False)
    s = doc["summary"]
    rate = (f", training-rate error RMS {s['its_err_pct_rms_base']:.1f} % -> "
            f"{s['its_err_pct_rms']:.1f} %" if math.isfinite(s.get("its_err_pct_rms", math.nan))
            else "")
    fig.suptitle(f"Calibration from preset {doc['base_preset']}: latency error RMS over the "
                 f"fitted facts {s['latency_err_pct_rms_base']:.1f} % -> "
                 f"{s['latency_err_pct_rms']:.1f} %{rate} (per source in the bands)",
                 fontsize=10, y=1.0 - 0.1 / height, va="top")
    fig.tight_layout(rect=(0.0, 0.0, 1.0, 1.0 - 0.3 / height))  # the title's own strip
    return save_figure(fig, path)
