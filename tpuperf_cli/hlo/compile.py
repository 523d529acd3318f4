"""Compile a program before optimization (StableHLO/MHLO text, or HLO
text) with XLA for one backend and return the optimized module's text:
`hlo-split --compile BACKEND` and `tpuperf compare --compile`.

It goes through jax's own PJRT client for that backend, with the compile
options jax itself uses for one device, so the result is what
jax.jit(f).lower(...).compile().as_text() gives on that backend. Only the
backend asked for is used: jax's default backend is left as it is.
"""

from tpuperf_cli.errors import TpuperfError

BACKENDS = ("cpu", "gpu", "tpu")


def backend_client(backend):
    """jax's PJRT client for a backend; TpuperfError when it is not here."""
    import jax

    try:
        devices = jax.devices(backend)
    except RuntimeError as e:
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise TpuperfError(f"--compile {backend}: no {backend} backend here ({first}); "
                           f"for tpu pip install -e '.[tpu]', for gpu -e '.[gpu]'") from None
    return devices[0].client, devices[0]


def optimize(text, backend, name="<input>", mlir=None, debug_options=None):
    """The optimized HLO text XLA makes of `text` for `backend` (cpu, gpu,
    tpu). mlir: whether text is StableHLO/MHLO (None: detect).
    debug_options: XLA DebugOptions fields to set ({name: value})."""
    from jax._src import compiler
    from jax._src.lib import xla_client as xc

    from tpuperf_cli.hlo.dump import is_mlir
    from tpuperf_cli.hlo.xla import computation_of_text, mlir_of

    if backend not in BACKENDS:
        raise TpuperfError(f"--compile {backend}: expected one of {', '.join(BACKENDS)}")
    client, device = backend_client(backend)
    if mlir is None:
        mlir = is_mlir(text)
    if mlir:
        program = text
    else:
        try:
            program = mlir_of(computation_of_text(text))
        except Exception as e:  # XLA's parser and converter raise XlaRuntimeError
            raise TpuperfError(f"{name}: XLA cannot read it as HLO ({_first(e)})",
                               exit_code=2) from None
    options = compiler.get_compile_options(num_replicas=1, num_partitions=1, backend=client)
    for key, value in (debug_options or {}).items():
        setattr(options.executable_build_options.debug_options, key, value)
    try:
        exe = client.compile_and_load(program, xc.DeviceList((device,)), options)
    except Exception as e:
        raise TpuperfError(f"{name}: XLA could not compile it for {backend} ({_first(e)})",
                           exit_code=2) from None
    return "\n\n".join(m.to_string() for m in exe.hlo_modules())


def _first(e, limit=300):
    lines = [l for l in str(e).strip().splitlines() if l.strip()]
    text = lines[0] if lines else type(e).__name__
    return text if len(text) <= limit else text[:limit] + "..."
