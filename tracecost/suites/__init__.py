"""The suite table: `tracecost run` runs every entry; each also has a command of its own."""

from tracecost.suites.duration import DurationSuite
from tracecost.suites.micro import MicroSuite
from tracecost.suites.transport import TransportSuite
from tracecost.suites.vm import VmSuite

SUITES = {suite.name: suite for suite in (DurationSuite(), MicroSuite(), TransportSuite(), VmSuite())}
