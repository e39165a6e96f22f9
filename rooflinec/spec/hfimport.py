"""A Hugging Face config.json becomes a model spec (YAML text), with its provenance.

Every field of the config is either mapped to a spec key or named in a located note that says
it is not modelled and what that leaves out; nothing is dropped silently. No network: the user
supplies the file (or the model folder holding it).
"""

from __future__ import annotations

import json
import os

import yaml

from rooflinec.spec import load as spec_load, validate
from rooflinec.base import yamlio
from rooflinec.base.errors import Problem, SpecError, one_line
from rooflinec.spec.hfconfig import COSTLESS, Inner, Read, Reader, _decoder, _layer_types, _optional, _window
from rooflinec.spec.hfimport_moe import ARCHITECTURES as MOE   # experts, latent and linear attention
from rooflinec.spec.hfimport_hybrid import ARCHITECTURES as HYBRID   # Mamba-2 (Nemotron-H), Jamba


def _llama(r: Reader) -> dict:
    spec = _decoder(r)
    _window(r, spec)
    return spec


def _qwen2(r: Reader) -> dict:
    spec = _decoder(r)
    spec["attention"].update(qkv_bias=True, out_bias=False)   # Qwen2: biases on q, k, v only
    _window(r, spec)
    return spec


def _qwen3(r: Reader) -> dict:
    spec = _decoder(r)
    spec["attention"]["qk_norm"] = True   # Qwen3: RMSNorm over d_head on every q and k head
    _window(r, spec)
    return spec


def _phi3(r: Reader) -> dict:
    spec = _decoder(r)   # fused qkv_proj and gate_up_proj hold the same weights; the study's
    _window(r, spec)     # `qkv: fused` convention costs the fused GEMM
    return spec


def _gemma2(r: Reader) -> dict:
    r.used.add("hidden_act")   # Gemma2 reads hidden_activation; hidden_act is its older alias
    spec = _decoder(r, act_key="hidden_activation", act_default="gelu_pytorch_tanh")
    spec["tied_embeddings"] = r.flag("tie_word_embeddings", True)
    spec["norm"]["post"] = True   # a norm before and after each sublayer: four per layer
    cap = r.data.get("attn_logit_softcapping")
    if cap is not None:   # on chip in FlashAttention kernels, so not an op of its own here
        per_score = 4 * spec["attention"]["head_dim"]
        r.note("attn_logit_softcapping", f"the attention soft-cap {cap}*tanh(s/{cap}): 3 FLOPs a "
                                         f"score beside attention's 4*d_head = {per_score}, and in "
                                         "the unfused program one more pass over the scores")
    cap = r.get("final_logit_softcapping")
    if cap is not None:
        spec["operators"] = [{
            "name": "logit_softcap", "category": "elementwise", "unit": "vector", "runs": "once",
            "after": "lm_head", "flops": "3*B*V", "bytes": "2*B*V*b",
            "shape": "cap*tanh(logits[B,V]/cap)",
            "notes": f"final_logit_softcapping: {cap}*tanh(x/{cap}), divide, tanh and multiply, 3 "
                     "FLOPs a logit (transformers' Gemma2); the logits read and written once; B "
                     "rows, as under the default convention logits: last"}]
    if not _layer_types(r, spec):   # transformers' Gemma2 default: sliding from layer 0, alternating
        _window(r, spec, alternating=True)
    r.notes.append(r.doc.problem((), "not modelled; this leaves out Gemma's embedding scale "
                                     "(the gathered rows times sqrt(d_model): one multiply per "
                                     "element, once per token)"))
    return spec


def _gpt2(r: Reader) -> dict:
    d_model = r.need("n_embd")
    act = r.get("activation_function", "gelu_new")
    if not isinstance(act, str) or act not in ("gelu_new", "gelu", "gelu_pytorch_tanh"):
        raise SpecError([r.problem("activation_function", f"activation {json.dumps(act)} is not "
                                   "covered; covered: gelu_new, gelu, gelu_pytorch_tanh")])
    heads = r.need("n_head")
    if d_model % heads:   # transformers' GPT2Attention raises the same ValueError
        raise SpecError([r.problem("n_head", f"n_embd {d_model} is not divisible by n_head {heads}; "
                                             "GPT-2's head dimension is n_embd / n_head")])
    return {
        "d_model": d_model, "n_layers": r.need("n_layer"), "vocab": r.need("vocab_size"),
        "max_context": r.need("n_positions"),
        "attention": {"n_heads": heads, "head_dim": d_model // heads,
                      "qkv_bias": True, "out_bias": True},
        "mlp": {"kind": "gelu", "d_ff": _optional(r, "n_inner", 4 * d_model), "bias": True},
        "norm": {"kind": "layernorm", "bias": True},
        "positions": "learned",
        "tied_embeddings": r.flag("tie_word_embeddings", True),
    }


ARCHITECTURES = {
    "LlamaForCausalLM": _llama, "MistralForCausalLM": _llama, "Qwen2ForCausalLM": _qwen2,
    "Qwen3ForCausalLM": _qwen3, "Gemma2ForCausalLM": _gemma2, "Phi3ForCausalLM": _phi3,
    "GPT2LMHeadModel": _gpt2,
    **MOE, **HYBRID,
}


# multimodal configs whose text model is a covered architecture: (its class, the section holding
# it, what the rest leaves out)
WRAPPED = {"Llama4ForConditionalGeneration": ("Llama4ForCausalLM", "text_config", {
    "vision_config": "the vision encoder and its projector (images): the spec is the text decoder"}),
    "Qwen3_5MoeForConditionalGeneration": ("Qwen3_5MoeForCausalLM", "text_config", {
        "vision_config": "the vision encoder and its merger (images and video): the spec is the text decoder"})}


# architectures refused with their reason rather than as unknown (architecture -> why)
REFUSED: dict[str, str] = {}


NAMED = 8                                   # fields the summary line names of each kind


def _name(note: Problem) -> str:
    """The field a note is on; a note on the whole config by what it leaves out."""
    if note.path and note.path != "(top level)":
        return note.path
    return note.message.split("leaves out ", 1)[-1].split(" (")[0]


def _names(notes: list[Problem]) -> str:
    names = [_name(n) for n in notes[:NAMED]]
    more = len(notes) - len(names)
    return ", ".join(names) + (f" and {more} more" if more else "")


def summary(notes: list[Problem]) -> str:
    """One line for `import` without -v: how many fields were not modelled, those that leave
    work uncounted named first (they change the costs), then those that cost nothing."""
    costless = [n for n in notes if n.message.startswith(COSTLESS)]
    uncounted = [n for n in notes if not n.message.startswith(COSTLESS)]
    parts = []
    if uncounted:
        parts.append(f"{len(uncounted)} leave work uncounted ({_names(uncounted)})")
    if costless:
        parts.append(f"{len(costless)} cost nothing ({_names(costless)})")
    return one_line(f"{notes[0].file}: {len(notes)} things not modelled: {'; '.join(parts)}; "
                    "-v lists each with what it leaves out")


def config_file(path: str) -> str:
    """The config.json of `path`: the file itself, or the one inside a model folder."""
    return os.path.join(path, "config.json") if os.path.isdir(path) else path


def load(path: str, hf_id: str | None = None):
    """The config at `path` as a loaded Model, the spec's YAML text and the notes. The spec is
    checked as a study would load it; a problem found there is located at the config key its
    value came from (a field derived from several keys: at the config's top, naming the field),
    since the spec itself is not written."""
    spec, notes = mapped(path, hf_id)
    text, file = emit(spec, notes), config_file(path)
    try:
        return spec_load.load_model(f"{file} (imported)", text), text, notes
    except SpecError as exc:
        raise SpecError([_relocated(p, spec, f"{file} (imported)", file) for p in exc.problems]) from None


def _relocated(problem: Problem, spec: dict, imported: str, file: str) -> Problem:
    """A problem of the imported spec at the config key its value was read from."""
    if problem.file != imported:
        return problem
    value = _values(spec).get(problem.path)
    if isinstance(value, Read):
        return value.where(f"{problem.message} (the spec's {problem.path})")
    return Problem(file, 1, 1, "(top level)", f"the spec imported from it: {problem.path}: {problem.message}")


def _values(node, path: tuple = ()) -> dict:
    """Every value of the spec by its path as problems name it (attention.n_kv_heads)."""
    out = {yamlio.format_path(path): node}
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, value in items:
        out.update(_values(value, path + (key,)))
    return out


def convert(path: str, hf_id: str | None = None) -> tuple[str, list[Problem]]:
    """The model spec YAML for the config at `path`, and the notes on what it leaves out."""
    spec, notes = mapped(path, hf_id)
    return emit(spec, notes), notes


def mapped(path: str, hf_id: str | None = None) -> tuple[dict, list[Problem]]:
    """The model spec (a mapping) for the config at `path`, and the notes on what it leaves out."""
    file = config_file(path)
    doc = yamlio.load(file, form=yamlio.JSON)
    if not isinstance(doc.data, dict):
        raise SpecError([doc.problem((), f"expected a config.json: {yamlio.JSON.mapping}")])
    problems = validate.numbers(doc, doc.data)   # finite, integers exact: as in any spec
    if problems:
        raise SpecError(problems)
    r = Reader(doc)
    r.used.update({"model_type", "_name_or_path"})   # read for the name, or only informative
    archs = r.get("architectures")
    arch = archs[0] if isinstance(archs, list) and archs else None
    if isinstance(arch, str) and arch in REFUSED:
        raise SpecError([doc.problem(("architectures", 0), f"architecture {arch} is not covered: {REFUSED[arch]}")])
    if not isinstance(arch, str) or arch not in {**ARCHITECTURES, **WRAPPED}:
        raise SpecError([doc.problem(("architectures", 0) if arch is not None else (),
                                     f"architecture {json.dumps(arch)} is not covered; covered: "
                                     f"{', '.join([*ARCHITECTURES, *WRAPPED])}")])
    outer, found = [], []
    if arch in WRAPPED:
        text_arch, key, left_out = WRAPPED[arch]
        outer, found, r = _unwrapped(r, key, left_out, arch), r.problems, Reader(Inner(doc, key))
        r.used.update({"model_type", "_name_or_path"})
    r.problems += found      # the wrapper's own fields' problems beside the text model's
    try:   # every field's problem collected (Reader.fail); a check that cannot go on adds its own
        spec = ARCHITECTURES[WRAPPED[arch][0] if arch in WRAPPED else arch](r)
    except SpecError as exc:
        r.raise_collected(exc.problems)
    r.raise_collected()
    if outer and "tie_word_embeddings" not in r.data:   # Llama4Config's own, when the text's is unsaid
        spec["tied_embeddings"] = outer[0]
    name = _model_name(hf_id, doc.data.get("_name_or_path"), arch)
    source = f"{hf_id or doc.data.get('_name_or_path') or 'an unnamed'} config.json ({arch}), imported by rooflinec import"
    notes = sorted([*outer[1:], *r.notes, *r.leftovers(arch)], key=lambda p: (p.line, p.col))
    head = {"name": name, **({"hf_id": hf_id} if hf_id else {})}
    return {**head, **spec, "source": source}, notes


def _unwrapped(r: Reader, key: str, left_out: dict, arch: str) -> list:
    """The multimodal config's own fields: [its tie_word_embeddings, then the notes on the rest].
    The text model's section must be a mapping; each other section is noted with what it leaves out."""
    if not isinstance(r.data.get(key), dict):
        raise SpecError([r.problem(key, f"expected the text model's config as a JSON object, which {arch} "
                                        f"holds in '{key}'")])
    r.used.add(key)
    tied = r.flag("tie_word_embeddings", False)
    for section, what in left_out.items():
        r.note(section, what)
    return [tied, *r.notes, *r.leftovers(arch)]


def _model_name(hf_id, name_or_path, arch: str) -> str:
    """The last part of --hf-id, else of _name_or_path: the first that is not empty. A folder's
    name says nothing of the model (a Hugging Face snapshot's is a commit hash), so without
    either the name says it is unnamed."""
    for given in (hf_id, name_or_path):
        last = str(given or "").rsplit("/", 1)[-1]
        if last.strip():
            return last
    return f"{arch} (unnamed: --hf-id names it)"


class _Dumper(yaml.SafeDumper):
    """Plain YAML: no anchors or aliases, whatever objects the mapping shares; a string
    holding a line break or control character double-quoted, where every one is escaped
    (PyYAML writes \x85 raw in a single-quoted string, and reads it back as a break)."""

    def ignore_aliases(self, data) -> bool:
        return True

    def represent_str(self, data: str):
        style = '"' if one_line(data) != data else None
        return self.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_Dumper.add_representer(str, _Dumper.represent_str)
_Dumper.add_representer(Read, yaml.SafeDumper.represent_int)   # a count read from the config is an int


def emit(spec: dict, notes: list[Problem]) -> str:
    """The spec through PyYAML's emitter, so no text from the config becomes structure (a
    string is quoted and escaped wherever YAML needs it); sub-mappings in flow style. The notes
    head the file as comments, each one line with its control characters escaped, so the spec
    keeps what it leaves out."""
    lines = ["# A model spec imported from a Hugging Face config.json by `rooflinec import`.",
             *(comment(f"{n.line}:{n.col}: {n.path}: {n.message}") for n in notes)]
    body = yaml.dump(spec, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=2**31 - 1,
                     default_flow_style=None)
    return "\n".join(lines) + "\n" + body


def comment(text: str) -> str:
    """`text` as one YAML comment line: line breaks and control characters escaped."""
    return "# " + one_line(text)
