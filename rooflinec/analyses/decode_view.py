"""The whole model's decode step: weight bytes against KV-cache bytes, and the average intensity."""

from rooflinec.analyses import analysis
from rooflinec.model.symbols import B, S


@analysis("decode_view", "Whole-model decode step")
def decode_view(ctx, params) -> dict:
    variant = params.variant
    points = []
    for batch in params.batch:
        for context in params.contexts:
            per_device = []
            for dev in ctx.devices:
                led = ctx.ledger(ctx.program("decode", variant, dev), dev, {B: batch, S: context})
                per_device.append({"device": dev.key, "time_s": led.time,
                                   "fits": ctx.fits(dev, batch, context),
                                   "tokens_per_s": batch / led.time, "attainable": led.attainable})
            points.append({"batch": batch, "context": context, "flops": led.flops,
                           "bytes": led.bytes, "weight_bytes": led.traffic("weights"),
                           "kv_bytes": led.traffic("kv_cache"),
                           "activation_bytes": led.traffic("activations"),
                           "score_bytes": led.traffic("scores"),
                           "intensity": led.flops / led.bytes, "devices": per_device})
    return {"variant": variant, "points": points}
