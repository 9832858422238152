"""The suite table. Each entry is one folder under tracecost/suites/ (see suites/base.py for what it
holds); `tracecost <name>` is generated from the entry, and `tracecost run` runs every entry at its
default size. Adding a suite: a new folder, and one line here.

The table's order is the report's: the order in which a reader asks (what tracing a function costs,
then a probe, the transport, real services, loading, the engines, compatibility, then the reader's
own program), whatever order a results file holds its suites in."""

from tracecost.report import style
from tracecost.suites.app import AppSuite
from tracecost.suites.compat import CompatSuite
from tracecost.suites.duration import DurationSuite
from tracecost.suites.fuse import FuseSuite
from tracecost.suites.load import LoadSuite
from tracecost.suites.micro import MicroSuite
from tracecost.suites.nginx import NginxSuite
from tracecost.suites.nginx_filter import NginxFilterSuite
from tracecost.suites.redis import RedisSuite
from tracecost.suites.transport import TransportSuite
from tracecost.suites.vm import VmSuite

SUITES = {
    suite.name: suite
    for suite in (
        DurationSuite(),
        MicroSuite(),
        TransportSuite(),
        NginxSuite(),
        NginxFilterSuite(),
        RedisSuite(),
        FuseSuite(),
        LoadSuite(),
        VmSuite(),
        CompatSuite(),
        AppSuite(),
    )
}
for _suite in SUITES.values():
    style.declare(_suite.name, _suite.method_styles)
