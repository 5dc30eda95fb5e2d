"""What the broker promises the rooms above it: names the network and the framework share."""
