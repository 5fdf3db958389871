"""paystream: the `paystream` command that ties the packages together."""
