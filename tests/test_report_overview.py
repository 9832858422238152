"""The report's first screen: a 1400×900 window of a real headless Chromium, without network, shows the
overview with a row for every suite; the charts behind the sections' folds fit their width once opened."""

from browser import chromium, console_errors, open_report
from unit.samples import document

from tracecost.report.render import write_report
from tracecost.suites import SUITES

SCREEN = (1400, 900)

# Where the overview and each of its rows are in the viewport, and whether they are displayed.
PLACES = """
var place = function (element) {
  var rect = element.getBoundingClientRect();
  return {suite: element.dataset.suite || null, top: rect.top, bottom: rect.bottom,
          shown: rect.height > 0 && getComputedStyle(element).visibility === "visible"};
};
var table = document.querySelector("table.overview");
return {viewport: [window.innerWidth, window.innerHeight, window.scrollY], table: place(table),
        rows: Array.from(table.querySelectorAll("tbody tr")).map(place)};
"""

# Open every fold, and once every fold holding charts says they are fitted (the page's toggle
# handler sets data-fitted when plotly's resizes resolve): each chart's width against its container's.
OPEN_FOLDS = """
var done = arguments[arguments.length - 1];
var folds = Array.from(document.querySelectorAll("details.fold")).filter(function (fold) {
  return fold.querySelector(".chart");
});
var widths = function () {
  return Array.from(document.querySelectorAll(".chart")).map(function (chart) {
    return {id: chart.id, drawn: Number(chart.querySelector(".main-svg").getAttribute("width")),
            container: chart.clientWidth};
  });
};
var fitted = function () { return folds.every(function (fold) { return fold.dataset.fitted === "yes"; }); };
new MutationObserver(function (changes, observer) {
  if (fitted()) { observer.disconnect(); done(widths()); }
}).observe(document.body, {attributes: true, subtree: true, attributeFilter: ["data-fitted"]});
document.querySelectorAll("details.fold").forEach(function (fold) { fold.open = true; });
if (folds.length === 0) { done(widths()); }
"""


def test_the_first_screen_shows_the_overview_with_every_suite(tmp_path):
    report = write_report([document()], tmp_path / "report.html")
    width, height = SCREEN
    with chromium(tmp_path / "profile") as driver:
        driver.execute_cdp_cmd(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
        )
        charts = open_report(driver, report)
        places = driver.execute_script(PLACES)
        driver.save_screenshot(str(tmp_path / "first-screen.png"))
        opened = driver.execute_async_script(OPEN_FOLDS)
        errors = console_errors(driver)
    assert places["viewport"] == [width, height, 0]
    assert [row["suite"] for row in places["rows"]] == list(SUITES)
    for place in (places["table"], *places["rows"]):
        assert place["shown"] and 0 <= place["top"] < place["bottom"] <= height, place
    assert charts and all(chart["traces"] == chart["data"] == chart["expected"] > 0 for chart in charts), charts
    # plotly's width may be fractional where the container's is whole pixels.
    assert len(opened) == len(charts) and all(abs(c["drawn"] - c["container"]) <= 1 for c in opened), opened
    assert all(chart["container"] > 0 for chart in opened), opened
    assert errors == []
