"""tracecost: what does tracing cost on this machine?"""

__version__ = "0.1.0"
