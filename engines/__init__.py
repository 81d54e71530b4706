"""Pure numerics of asktell: search-space encoding, engines and metrics.

Nothing here does I/O or imports ``service`` or ``client``; see ``engines.base`` for the contract.
"""
