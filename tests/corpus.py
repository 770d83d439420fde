"""A deterministic corpus of 2,400 strings that exercises every branch of the tokenizer."""
import random

EN = ("the quick brown fox jumps over lazy dog model token vector layer norm attention weight "
      "Hello world Python tensor embedding learning rate gradient Transformer by hand").split()
ZH = "的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年得就那要下以生会自着去之过家学对可她里后小么心多天而能好都然没日于起还发成事只作当想看文无开手十用主行方又如前所本见经头面公同三已老从动两长知民样现分将外但身些与高意进把法此实回二理美点月明其种声全工己话儿者向情部正名定女问力机给等几很业最间新什打便位因重被走电四第门相次东政海口使教西再平真听世气信北少关并内加化由却代军产入先山五太水万市眼体别处总才场师书比住员九笑性通目华报立马命张活难神数件安表原车白应路期叫死常提感金何更反合放做系计或司利受光王果亲界及今京务制解各任至清物台象记边共风战干接它许八特觉望直服毛林题建南度统色字请交爱让认算论百吃义科怎元社术结六功指思非流每青管夫连远资队跟带花快条院变联言权往展该领传近留红治决周保达办运武半候七必城父强步完革深区即求品士转量空甚众技轻程告江语英基派满式李息写呢识极令黄德收脸钱党倒未持音送始观司毕老师人力资源俱乐部猫北京"
JA = "こんにちは世界ありがとうございますカタカナひらがな東京日本語の文章です。"
KO = "안녕하세요세계한국어문장입니다감사합니다"
AR = "مرحبا بالعالم اللغة العربية جميلة"
AR_MARKS = "\u064b\u064c\u064d\u064e\u064f\u0650\u0651\u0652"
EMOJI = ["😀", "🚀", "👍🏽", "🇨🇳", "🇺🇸", "👨\u200d👩\u200d👧\u200d👦", "🧑\u200d💻", "❤️", "🏳️\u200d🌈", "1️⃣", "🤖"]
COMBINING = ["e\u0301", "a\u0308", "n\u0303", "o\u0302\u0323", "\u1100\u1161", "i\u0307", "u\u031b\u0301"]
CODE = ["def f(x):\n    return x ** 2\n", "for (int i = 0; i < n; ++i) { s += a[i]; }",
        "if __name__ == '__main__':\n\tmain()", "<div class=\"a\">&nbsp;</div>", "x = {'k': [1, 2, 3]}",
        "SELECT * FROM t WHERE id=42;", "fn main() -> Result<(), Box<dyn Error>> {}", "a->b::c<<=d>>e"]
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>", "<tool_call>", "<|vision_pad|>",
           "<|fim_middle|>", "<tts_text_bos_single>", "<|audio_pad|>"]
SPACES = [" ", "  ", "\t", "\n", "\n\n", "\r\n", " \n ", "\t\t ", "    ", "\u3000", "\u00a0", "\n\n\n   "]
CONTRACTIONS = ["I'm", "I'M", "don't", "DON'T", "we'll", "WE'LL", "you're", "YOU'RE", "it's", "IT'S", "they've",
                "THEY'VE", "he'd", "HE'D", "'s", "'S", "O'Neil", "rock'n'roll"]


def corpus(n=2400, seed=20261129):
    rng = random.Random(seed)
    word = lambda: rng.choice(EN)

    def digits():
        return "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 14)))

    makers = [
        lambda: " ".join(word() for _ in range(rng.randint(1, 12))) + rng.choice([".", "!", "?", "", ","]),
        lambda: "".join(rng.choice(ZH) for _ in range(rng.randint(1, 20))) + rng.choice(["。", "，", "！", ""]),
        lambda: "".join(rng.choice(JA) for _ in range(rng.randint(1, 15))),
        lambda: "".join(rng.choice(KO) for _ in range(rng.randint(1, 12))),
        lambda: " ".join(AR.split()[rng.randrange(4)] + rng.choice(["", rng.choice(AR_MARKS)]) for _ in range(3)),
        lambda: "".join(rng.choice(EMOJI + [" ", word()]) for _ in range(rng.randint(1, 8))),
        lambda: "".join(rng.choice(COMBINING + [word(), " "]) for _ in range(rng.randint(1, 6))),
        lambda: digits() + rng.choice([" ", ".", ",", " + ", "-"]) + digits(),
        lambda: rng.choice(CODE),
        lambda: word() + "".join(rng.choice(SPACES) for _ in range(rng.randint(1, 5))) + word(),
        lambda: " ".join(rng.choice(CONTRACTIONS) for _ in range(rng.randint(1, 5))),
        lambda: word() + rng.choice(SPECIAL) + rng.choice([word(), "", " ", "\n", rng.choice(ZH)]) + rng.choice(SPECIAL),
        lambda: "".join(rng.choice(SPACES) for _ in range(rng.randint(1, 10))),
        lambda: "".join(rng.choice([word(), rng.choice(ZH), rng.choice(EMOJI), digits(), rng.choice(SPACES),
                                    rng.choice(CONTRACTIONS), rng.choice(SPECIAL), rng.choice(".,;:!?()[]{}\"'")])
                        for _ in range(rng.randint(2, 14))),
    ]
    fixed = ["", " ", "Hello! 毕老师！1 + 1 = 2", "人力资源", " " * 300, "a" * 500, "\n" * 50, "1" * 40,
             "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\n你好<|im_end|>",
             "<|im_start|<|im_end|>>", "<|endoftext|><|endoftext|>", "e\u0301" * 20, "👨\u200d👩\u200d👧" * 5]
    return fixed + [rng.choice(makers)() for _ in range(n - len(fixed))]


def mixed_text(n_bytes, seed=7):
    """About n_bytes of mixed text, with no string repeated (for the throughput benchmark)."""
    rng, parts, total, batch = random.Random(seed), [], 0, 0
    while total < n_bytes:
        for s in corpus(5000, seed + batch)[13:]:                     # new strings each batch
            s = s.replace("fox", "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 9))))
            parts.append(s)
            total += len(s.encode("utf-8")) + 1
            if total >= n_bytes:
                break
        batch += 1
    return "\n".join(parts)
