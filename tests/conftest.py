"""fastcoord.testing as a plugin, as a user's suite loads it: its `fastcoord_serve` fixture;
pytester, for the test that runs such a suite."""

pytest_plugins = ["fastcoord.testing", "pytester"]
