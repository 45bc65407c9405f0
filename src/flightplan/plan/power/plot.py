"""The power curves of a campaign's comparisons as a PNG (``plan --power-plot``)."""

from __future__ import annotations

import io

from flightplan.plan.power.campaign import CampaignPower
from flightplan.plan.power.comparison import TARGET_POWER

__all__ = ["power_png"]


def power_png(power: CampaignPower, *, title: str = "") -> bytes:
    """Each comparison's power curve (probability of each verdict against the true gain,
    threshold and expected gain marked, and P(meets) with the other replicate counts of
    :data:`~flightplan.plan.power.comparison.SEED_COUNTS` dashed), one panel per
    comparison, as PNG bytes (matplotlib, Agg).

    Raises:
        ValueError: no comparison has a computed power.
    """
    if not power.comparisons:
        raise ValueError("no comparison has a computed power")
    from matplotlib.figure import Figure

    count = len(power.comparisons)
    figure = Figure(figsize=(7.5, 3.2 * count), dpi=100)
    for row, comparison in enumerate(power.comparisons):
        axes = figure.add_subplot(count, 1, row + 1)
        gains, meets, short, unsure = comparison.curve
        axes.plot(gains, meets, color="tab:green", label="meets")
        axes.plot(gains, short, color="tab:red", label="does not meet")
        axes.plot(gains, unsure, color="tab:gray", label="inconclusive")
        for replicate, style in zip((r for r in comparison.by_seeds
                                     if r.seeds != comparison.seeds.replicates), ("--", ":")):
            axes.plot(gains, replicate.meets, color="tab:green", linestyle=style,
                      label=f"meets, K={replicate.seeds} seeds")
        axes.axvline(comparison.min_gain, color="black", linestyle="--",
                     label=f"threshold {comparison.min_gain:+g}")
        axes.axvline(comparison.expected_gain, color="tab:blue", linestyle=":",
                     label=f"expected gain {comparison.expected_gain:+g}")
        axes.axhline(TARGET_POWER, color="lightgray", linewidth=0.8)
        axes.set_ylim(-0.02, 1.02)
        axes.set_ylabel("probability")
        axes.set_title(f"{comparison.variant} − {comparison.reference}: {comparison.n_test} "
                       f"test examples, resolution ±{comparison.resolution:.3f}", fontsize=10)
        axes.set_xlabel(f"true gain ({comparison.metric}"
                        + (", lower is better" if comparison.goal == "min" else "") + ")")
        axes.legend(fontsize=7, loc="center right")
    if title:
        figure.suptitle(title)
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return buffer.getvalue()
