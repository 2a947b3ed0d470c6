"""Tests of turnfsm.render and of the ``turnfsm diagram`` / ``turnfsm audit`` commands."""
