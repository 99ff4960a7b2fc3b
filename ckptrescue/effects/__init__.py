"""The effects layer: the only code that runs processes, opens devices or talks to the network."""
