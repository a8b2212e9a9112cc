"""The package version, recorded in every manifest and ``score.json`` the package writes."""

__version__ = "0.1.0"
