"""Exercise 250 (chapter 12): the accept rule of speculative greedy decoding.

Expected values come from the library (qwen/mtp.py `accepted`, which tests/test_mtp.py checks
against plain greedy decoding). Inputs: synthetic logits, with drafts made from their argmax and
changed at chosen places, so that each known mistake gives a different answer; one case has the
model's whole vocabulary (248,320 scores per position).
"""
from practice._judge.exercises import Case, Diagnosis, Exercise


def _torch():
    import torch
    return torch


def accept_expected(drafts, logits):
    from qwen.mtp import accepted
    return accepted(list(drafts), logits.argmax(-1).tolist())


def _leading(pairs):
    """How many of the pairs agree from the first one on (the run stops at the first that does not)."""
    n = 0
    for a, b in pairs:
        if a != b:
            break
        n += 1
    return n


def _accept_mistake(kind):
    """accept_drafts with one rule changed (the name of each is its diagnosis's)."""
    def mistake(drafts, logits):
        c = logits.argmax(-1).tolist()
        d, k = list(drafts), len(drafts)
        a = _leading(zip(d, c))
        if kind == "first_agreement":                             # runs while they DISagree
            a = 0
            while a < k and d[a] != c[a]:
                a += 1
            return a, c[a]
        if kind == "off_by_one":                                  # the model's own token counted as accepted
            return a + 1, c[a]
        if kind == "next_from_draft" and a < k:                   # the rejected draft taken as the next token
            return a, d[a]
        if kind == "count_before_check" and a < k:                # count += 1, then the check breaks the loop
            return a + 1, c[a + 1]
        if kind == "count_all":                                   # every agreeing draft, not the leading run
            n = sum(x == y for x, y in zip(d, c))
            return n, c[n]
        if kind == "shifted_rows":                                # draft j against row j + 1
            a = _leading(zip(d, c[1:]))
            return a, c[a]
        if kind == "last_row":                                    # the next token always from row k
            return a, c[k]
        if kind == "k_minus_1":                                   # a range(k - 1) loop: the last draft never read
            a = _leading(zip(d[:k - 1], c))
            return a, c[a]
        return a, c[a]
    return mistake


def _drafts(logits, wrong, g):
    """The argmax of each of the first k positions, replaced by another token at the `wrong` ones."""
    torch = _torch()
    best = logits.argmax(-1).tolist()[:-1]
    vocab = logits.shape[-1]
    return [(t + 1 + int(torch.randint(0, vocab - 1, (1,), generator=g))) % vocab if j in wrong else t
            for j, t in enumerate(best)]


def cases_250(ctx):
    torch = _torch()
    g = ctx.gen(250)

    def case(k, vocab, wrong, name):
        logits = torch.randn(k + 1, vocab, generator=g) * 3
        drafts = _drafts(logits, wrong, g)
        args = (drafts, logits)
        return Case("accept_drafts", name, args, accept_expected(*args),
                    about=("compare draft j with the model's choice argmax(logits[j]) after the tokens before it; stop at "
                           "the first disagreement; the next token is the model's choice there",
                           "把第 j 个草稿和模型在它之前那些词元之后的选择 argmax(logits[j]) 比较；在第一次不一致时停下；"
                           "下一个词元是模型在那里的选择"))
    def chosen(choices, drafts, name):
        """A case with the model's choices given (each row's argmax) and the drafts written out."""
        logits = torch.randn(len(choices), 50, generator=g)
        logits[torch.arange(len(choices)), torch.tensor(choices)] += 10
        args = (list(drafts), logits)
        return Case("accept_drafts", name, args, accept_expected(*args), about=about)

    about = ("compare draft j with the model's choice argmax(logits[j]) after the tokens before it; stop at "
             "the first disagreement; the next token is the model's choice there",
             "把第 j 个草稿和模型在它之前那些词元之后的选择 argmax(logits[j]) 比较；在第一次不一致时停下；"
             "下一个词元是模型在那里的选择")
    V = ctx.cfg.vocab_size
    return [
        chosen([5, 5, 7, 8, 9, 10], [5, 5, 1, 8, 9],
               ("5 drafts: the model repeats a token, the 3rd draft is wrong, the 4th and 5th agree again",
                "5 个草稿：模型重复了一个词元，第 3 个草稿错，第 4、5 个又一致")),
        chosen([4, 4, 4, 4], [4, 4, 4], ("3 drafts of one repeated token, all agree", "3 个草稿都是同一个重复的词元，全部一致")),
        case(4, 500, {2}, ("4 drafts, the 3rd wrong, the 4th agrees again", "4 个草稿，第 3 个错，第 4 个又一致")),
        case(3, 500, set(), ("3 drafts, all agree", "3 个草稿，全部一致")),
        case(4, 500, {0}, ("4 drafts, only the 1st wrong", "4 个草稿，只有第 1 个错")),
        case(1, 300, set(), ("1 draft that agrees", "1 个一致的草稿")),
        case(2, 300, {1}, ("2 drafts, the 2nd wrong", "2 个草稿，第 2 个错")),
        case(3, V, {1, 2}, (f"3 drafts over the {ctx.label} checkpoint's {V:,} tokens, the 2nd and 3rd wrong",
                            f"{ctx.checkpoint_zh}的 {V:,} 个词元上的 3 个草稿，第 2、3 个错")),
    ]


def _signature(kind):
    """The learner's answer equals the mistake's on a case where the mistake changes the answer, and
    no other known mistake gives the same answer there."""
    def test(case, got):
        wrong = MISTAKES_250[kind](*case.args)
        if not isinstance(got, (tuple, list)) or wrong == case.expected or tuple(got) != wrong:
            return False
        return all(other == kind or m(*case.args) != wrong for other, m in MISTAKES_250.items())
    return test


MISTAKES_250 = {name: _accept_mistake(name) for name in (
    "off_by_one", "next_from_draft", "first_agreement", "count_before_check", "count_all", "shifted_rows",
    "last_row", "k_minus_1")}

DIAGNOSES_250 = [
    Diagnosis("off_by_one", "accept_drafts",
              ("looks like the count is one too many: the model's own next token was counted as an accepted draft "
               "(count only the drafts that agree, 0 to k; the next token is the second value, not part of the count)",
               "看起来数目多了一个：模型自己的下一个词元被算成了一个被接受的草稿（只数一致的草稿，0 到 k 个；"
               "下一个词元是第二个返回值，不算在数目里）"),
              test=_signature("off_by_one"), hint=1),
    Diagnosis("next_from_draft", "accept_drafts",
              ("looks like the next token was taken from the drafts: at the first disagreement the draft is wrong by "
               "definition; the next token is the model's own choice there, argmax(logits[count])",
               "看起来下一个词元取自草稿：在第一次不一致的地方，草稿按定义就是错的；下一个词元是模型在那里的选择，"
               "argmax(logits[count])"),
              test=_signature("next_from_draft"), hint=2),
    Diagnosis("first_agreement", "accept_drafts",
              ("looks like the loop stopped at the first agreement: drafts are kept WHILE they agree, so stop at the "
               "first disagreement (a draft after a wrong one was guessed from a wrong text and is never kept)",
               "看起来循环在第一次一致时停下了：草稿在一致的时候才保留，所以要在第一次不一致时停下（错的草稿之后的草稿"
               "是从错误的文本猜出来的，永远不保留）"),
              test=_signature("first_agreement"), hint=0),
    Diagnosis("count_before_check", "accept_drafts",
              ("looks like the count was incremented before the check: at the first disagreement the count is one "
               "too many and the next token is read one row too far (count + 1, choices[count + 1]). Check "
               "drafts[count] == choices[count] first, then count += 1",
               "看起来先给数目加一、再做比较：在第一次不一致的地方，数目多了一个，下一个词元也多读了一行"
               "（count + 1, choices[count + 1]）。要先检查 drafts[count] == choices[count]，再 count += 1"),
              test=_signature("count_before_check"), hint=1),
    Diagnosis("count_all", "accept_drafts",
              ("looks like every agreeing draft was counted: only the leading run is kept, since a draft after a wrong "
               "one was guessed from a wrong text; stop counting at the first disagreement",
               "看起来把所有一致的草稿都数上了：只保留开头连续一致的那一段，因为错的草稿之后的草稿是从错误的文本猜出来的；"
               "在第一次不一致时停止计数"),
              test=_signature("count_all"), hint=0),
    Diagnosis("shifted_rows", "accept_drafts",
              ("looks like draft j was compared with row j + 1: row j of the logits is the model's prediction before "
               "draft j (row 0: after the last chosen token), so compare drafts[j] with argmax(logits[j])",
               "看起来第 j 个草稿是和第 j + 1 行比较的：logits 的第 j 行是模型在第 j 个草稿之前的预测（第 0 行：在上一个"
               "选定的词元之后），所以要把 drafts[j] 和 argmax(logits[j]) 比较"),
              test=_signature("shifted_rows"), hint=0),
    Diagnosis("last_row", "accept_drafts",
              ("looks like the next token always came from the last row: it is the model's choice right after the "
               "kept drafts, choices[count] (row k only when all k drafts were kept)",
               "看起来下一个词元总是取自最后一行：它是模型在保留的草稿之后的选择 choices[count]（只有 k 个草稿全部保留时"
               "才是第 k 行）"),
              test=_signature("last_row"), hint=2),
    Diagnosis("k_minus_1", "accept_drafts",
              ("looks like the last draft was never compared (a range(k - 1) loop, or drafts[:-1]): all k drafts can "
               "be kept, count goes from 0 to k, and then the next token is row k's choice",
               "看起来最后一个草稿从没比较过（range(k - 1) 的循环，或 drafts[:-1]）：k 个草稿都可能保留，数目从 0 到 k，"
               "那时下一个词元是第 k 行的选择"),
              test=_signature("k_minus_1"), hint=1),
]

EXERCISES = [
    Exercise("250", "accept_drafts", ("The accept rule of speculative decoding", "推测解码的接受规则"), "easy", True,
             ("accept_drafts",),
             [("choices = logits.argmax(-1): the model's own greedy token after each prefix; keep draft j while "
               "drafts[j] == choices[j], and stop at the first j where they differ.",
               "choices = logits.argmax(-1)：模型在每个前缀之后自己的贪心词元；当 drafts[j] == choices[j] 时保留第 j 个草稿，"
               "在第一个不相等的 j 处停下。"),
              ("The count is the number of drafts kept: 0 to k. It does not include the next token.",
               "数目是保留下来的草稿个数：0 到 k。它不包括下一个词元。"),
              ("The next token is choices[count]: the model's choice after the kept drafts (after all k, its (k+1)-th "
               "choice). Return (count, next) as two Python ints: int(...).",
               "下一个词元是 choices[count]：模型在保留的草稿之后的选择（k 个全保留时，就是它的第 k+1 个选择）。"
               "把 (count, next) 作为两个 Python 整数返回：int(...)。")],
             cases_250, DIAGNOSES_250,
             {"250_off_by_one.py": "off_by_one", "250_next_from_draft.py": "next_from_draft",
              "250_first_agreement.py": "first_agreement", "250_count_before_check.py": "count_before_check",
              "250_count_all.py": "count_all", "250_shifted_rows.py": "shifted_rows", "250_last_row.py": "last_row",
              "250_k_minus_1.py": "k_minus_1"}),
]
