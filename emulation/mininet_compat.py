"""Mininet's classes, imported in one place that undoes its logging side effect.

Importing mininet.log makes MininetLogger (with its own console handler) the class of every logger created
after it, which would give our modules' loggers a second console handler. Every module of ours that needs
Mininet imports it from here, so the default logger class is restored before any of our loggers exists,
whatever the order of the imports.
"""

from __future__ import annotations

import logging

from mininet.link import Link
from mininet.log import setLogLevel
from mininet.net import Mininet
from mininet.node import Host, Switch
from mininet.topo import Topo

logging.setLoggerClass(logging.Logger)

__all__ = ["Host", "Link", "Mininet", "Switch", "Topo", "setLogLevel"]
