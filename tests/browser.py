"""Headless Debian Chromium through selenium, for opening reports from file:// without network."""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path

from selenium import webdriver
from selenium.webdriver.chrome.service import Service

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"

# Every chart's rendered trace groups and the points each drew, as plotly's DOM shows them.
CHART_STATE = """
return Array.from(document.querySelectorAll('.chart')).map(function (div) {
  var traces = div.querySelectorAll('.scatterlayer .trace, .barlayer .trace');
  var points = div.querySelectorAll('.scatterlayer .trace .point, .barlayer .trace .point');
  return {id: div.id, title: div.dataset.title, expected: Number(div.dataset.expectedTraces),
          data: (div.data || []).length, traces: traces.length, points: points.length};
});
"""


@contextlib.contextmanager
def chromium(profile_dir: Path):
    if not (shutil.which(CHROMIUM) and shutil.which(CHROMEDRIVER)):
        raise RuntimeError("Debian chromium and chromium-driver are needed (make setup installs them)")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--disable-quic",
        "--window-size=1400,1000",
        f"--user-data-dir={profile_dir}",
    ):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        # No network at all: a report that needs one (a CDN script, a font) must fail here.
        driver.execute_cdp_cmd("Network.enable", {})
        driver.execute_cdp_cmd(
            "Network.emulateNetworkConditions",
            {"offline": True, "latency": 0, "downloadThroughput": -1, "uploadThroughput": -1},
        )
        yield driver
    finally:
        driver.quit()


def open_report(driver, report: Path) -> list[dict]:
    driver.get(report.resolve().as_uri())
    driver.set_script_timeout(60)
    # Wait until plotly has drawn every chart it was given.
    driver.execute_async_script("""
      var done = arguments[arguments.length - 1];
      var check = function () {
        var charts = document.querySelectorAll('.chart');
        var drawn = Array.from(charts).every(function (d) { return d.querySelector('.main-svg'); });
        if (drawn) { done(true); } else { setTimeout(check, 50); }
      };
      check();
    """)
    return driver.execute_script(CHART_STATE)


def console_errors(driver) -> list[dict]:
    return [entry for entry in driver.get_log("browser") if entry["level"] in ("SEVERE", "ERROR")]
