"""Building blocks of the plugin's models: attention, position schemes, equivariant layers."""
