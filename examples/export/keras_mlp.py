"""A TensorFlow / Keras model to export with ``planmap export --from tf`` (needs ``pip install tensorflow``).

    planmap export --from tf examples/export/keras_mlp.py:model --arg 'f32[32,256]' -o tf_mlp.mlir
    planmap export --from tf path/to/saved_model --arg 'f32[32,256]' -o tf_mlp.mlir     # a SavedModel

``model`` is any zero-argument function returning a Keras model, ``tf.function`` or callable (or
the object itself); it is compiled with XLA (``jit_compile=True``) at zeros of the ``--arg`` shapes.
The weights (``tf.Variable``\\ s) become arguments of ``@main`` after the inputs. Outputs: ``.mlir``
(StableHLO text) or ``.mlirbc`` (MLIR bytecode).
"""

SIZES = (256, 512, 512, 512, 64)


def model():
    """The example MLP (``planmap.examples.models.mlp`` layer for layer) as a Keras Sequential model."""
    import tensorflow as tf

    layers = [tf.keras.layers.Dense(b, activation="relu" if i < len(SIZES) - 2 else None)
              for i, b in enumerate(SIZES[1:])]
    net = tf.keras.Sequential([tf.keras.Input((SIZES[0],)), *layers])
    return net
