"""The suite table: `tracecost run` runs every entry; each also has a command of its own."""

from tracecost.suites.duration import DurationSuite
from tracecost.suites.transport import TransportSuite

SUITES = {suite.name: suite for suite in (DurationSuite(), TransportSuite())}
