# SPDX-License-Identifier: Apache-2.0
"""Framework-independent parts of the Python package (lifecycle, topology, process sets)."""
