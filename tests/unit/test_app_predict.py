"""tracecost app's prediction: each site's hits times the per-hit cost of its class, as the micro
suite measured it, beside the measured added time (tracecost/suites/app/predict.py)."""

from __future__ import annotations

import json

import pytest

from tracecost import results
from tracecost.errors import TracecostError
from tracecost.suites.app import predict
from tracecost.suites.app.sample import COSTS, HITS

from .samples import document


def aggregates() -> dict[str, dict]:
    return {agg["method"]: agg for agg in document("app")["suites"]["app"]["aggregates"]}


def test_each_sites_hits_are_priced_at_its_class_cost_on_the_methods_runtime():
    found = aggregates()
    malloc, ret, write, usdt = HITS.values()
    # The kernel: malloc's push is emulated, its return a uretprobe, write a tracepoint, the USDT nop emulated.
    kernel = malloc * 1000.0 + ret * 2100.0 + write * 40.0 + usdt * 1000.0
    # uebpf: a jump at malloc, a uretprobe, its system call hook, an int3 at the USDT probe.
    uebpf = malloc * 40.0 + ret * 60.0 + write * 50.0 + usdt * 900.0
    assert found["kernel"]["predicted_added_s"]["value"] == pytest.approx(kernel * 1e-9)
    assert found["uebpf"]["predicted_added_s"]["value"] == pytest.approx(uebpf * 1e-9)
    low, high = found["uebpf"]["predicted_added_s"]["ci95_low"], found["uebpf"]["predicted_added_s"]["ci95_high"]
    assert low < uebpf * 1e-9 < high
    assert found["baseline"]["predicted_added_s"] is None and found["baseline"]["prediction_agrees"] is None
    assert found["kernel"]["prediction_agrees"] in (True, False)


def test_without_micro_results_the_prediction_says_how_to_get_them():
    sites = [{"spec": "libc:malloc", "kind": "uprobe", "kernel_class": "emulated", "uebpf_patch": "jump"}]
    predicted, why = predict.predicted_s(sites, {"libc:malloc": 10}, "kernel", None)
    assert predicted is None and "tracecost micro --ops" in why and "uprobe_push" in why
    # A class whose operation the file lacks is named.
    predicted, why = predict.predicted_s(sites, {"libc:malloc": 10}, "kernel", {"file": "f.json", "costs": {}})
    assert predicted is None and why == "no per-hit cost measured for libc:malloc (uprobe_push) in f.json"
    # A site the runtime refuses has no operation.
    refused = [{**sites[0], "uebpf_patch": "refused"}]
    assert "no operation for its class" in predict.predicted_s(refused, {}, "uebpf", COSTS)[1]


def test_the_costs_come_from_the_file_named_or_the_newest_that_holds_the_micro_suite(tmp_path, monkeypatch):
    with_micro, without = tmp_path / "results" / "a", tmp_path / "results" / "b"
    for folder, names in ((with_micro, ("micro",)), (without, ("vm",))):
        folder.mkdir(parents=True)
        (folder / "results.json").write_text(json.dumps(document(*names)))
    monkeypatch.chdir(tmp_path)
    found = predict.find_costs(None)  # b is newer, but holds no micro suite
    assert found["file"] == "results/a/results.json" and found["costs"]["uebpf"]
    assert predict.find_costs(with_micro)["costs"] == predict.costs_of(results.load(with_micro))  # read as checked
    with pytest.raises(TracecostError, match="no micro suite results"):
        predict.find_costs(without)
    monkeypatch.chdir(tmp_path / "results")
    assert predict.find_costs(None) is None  # no results/ here


@pytest.mark.parametrize(
    "measured,predicted,agrees",
    [
        ({"value": 1.0, "ci95_low": 0.8, "ci95_high": 1.2}, {"value": 1.1, "ci95_low": 1.0, "ci95_high": 1.2}, True),
        ({"value": 1.0, "ci95_low": 0.8, "ci95_high": 1.2}, {"value": 2.0, "ci95_low": 1.9, "ci95_high": 2.1}, False),
        ({"value": 1.0, "ci95_low": None, "ci95_high": None}, {"value": 2.0, "ci95_low": 1.9, "ci95_high": 2.1}, None),
        (None, None, None),
    ],
)
def test_the_measured_difference_agrees_where_the_cis_overlap(measured, predicted, agrees):
    assert predict.agrees(measured, predicted) is agrees
