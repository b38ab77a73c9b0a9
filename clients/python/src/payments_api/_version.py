# generated from openapi.json (info.version) by `make clients`
__version__ = "0.1.0"
