"""Exercise 202 · Count the parameters per layer type from the header (easy; no PyTorch needed)

Given a safetensors header (as exercise 201 returns it: {name: {"dtype", "shape", "data_offsets"}})
and the config's layer_types (one "linear_attention" or "full_attention" per layer), count the
language model's parameters by where they sit:
  "linear_attention"  everything under model.language_model.layers.{i}. for linear-attention layers i
  "full_attention"    the same for full-attention layers
  "outside_layers"    the rest of model.language_model.* (embedding, final norm) and lm_head.*
Vision (model.visual.*) and multi-token-prediction (mtp.*) tensors are not counted.

Write count_parameters(header, layer_types) -> {"linear_attention": n, "full_attention": n, "outside_layers": n}

练习 202 · 根据文件头按层类型统计参数量（简单；不需要 PyTorch）

给定一个 safetensors 文件头（即练习 201 返回的 {名字: {"dtype", "shape", "data_offsets"}}）和配置里的
layer_types（每层一个 "linear_attention" 或 "full_attention"），按位置统计语言模型的参数量：
  "linear_attention"  线性注意力层 i 的 model.language_model.layers.{i}. 下的所有张量
  "full_attention"    全注意力层的同样部分
  "outside_layers"    model.language_model.* 里的其余部分（嵌入表、最后的归一化）以及 lm_head.*
视觉塔（model.visual.*）和多词元预测（mtp.*）的张量不算。

写出 count_parameters(header, layer_types) -> {"linear_attention": n, "full_attention": n, "outside_layers": n}

Check: python practice/judge.py 202
"""


def count_parameters(header, layer_types):
    raise NotImplementedError
