"""A PyTorch model to export with ``planmap export --from torch`` (needs ``pip install torchax``).

    planmap export --from torch examples/export/torch_mlp.py:model --arg 'f32[32,256]' -o torch_mlp.mlir

``model`` is any zero-argument function returning a ``torch.nn.Module`` (or the module itself);
``--arg`` gives each input's dtype and shape (zeros are traced; weights stay the module's). Replace
the network with yours. The parameters become arguments of ``@main`` before the inputs.
"""

from torch import nn

SIZES = (256, 512, 512, 512, 64)


def model() -> nn.Module:
    """The example MLP (``planmap.examples.models.mlp`` layer for layer)."""
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(SIZES[:-1], SIZES[1:], strict=True)):
        layers.append(nn.Linear(a, b))
        if i < len(SIZES) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)
