# SPDX-License-Identifier: Apache-2.0
"""hvd: distributed training for PyTorch (``hvd.torch``), numpy (``hvd.numpy``) and C++.

``import hvd.torch as hvd`` is a drop-in for ``import horovod.torch as hvd``.
"""
__version__ = "0.1.0"
