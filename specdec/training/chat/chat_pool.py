"""On-policy training text for a chat (instruct) target, with no data download.

The target writes its own questions (asked, under its chat template, to write one about a topic
from a short list below), then answers them under its chat template, greedy and at T = 1; and it
continues raw text (its own questions, without the template). Every position's post-norm feature
is kept while sampling, with what the loss needs of the target's full p there: the log of its
normaliser over the whole vocabulary (`lse`, so p on a vocabulary subset is exp(logit - lse)) and
its argmax (`top`, for greedy agreement). So training reads p through the subset's rows only.

A row ends at the target's end-of-turn token (`ends`: one past it); the positions after it are
masked out of the loss, as a run stops there.
"""

from __future__ import annotations

import time
from pathlib import Path

import torch

from ...drafting import features as fx

TOPICS = (
    "cooking pasta", "the solar system", "photosynthesis", "the French Revolution", "saving money",
    "learning a language", "dogs", "cats", "gardening", "climate change", "the human heart",
    "volcanoes", "writing a resume", "Python programming", "machine learning", "the Roman Empire",
    "healthy sleep", "running a marathon", "baking bread", "electric cars", "the water cycle",
    "World War II", "chess", "the stock market", "vaccines", "the moon", "recycling", "coffee",
    "the Internet", "black holes", "Shakespeare", "music theory", "painting", "meditation",
    "time management", "job interviews", "the ocean", "rainforests", "earthquakes", "DNA",
    "ancient Egypt", "democracy", "the immune system", "soccer", "basketball", "travel in Japan",
    "renewable energy", "nutrition", "algebra", "geometry", "probability", "poetry", "friendship",
    "public speaking", "first aid", "birds", "insects", "weather forecasts", "smartphones",
    "social media", "the Great Wall of China", "Albert Einstein", "electricity", "magnets",
    "the printing press", "inflation", "taxes", "renting an apartment", "writing an essay",
    "philosophy", "the brain", "diabetes", "exercise", "yoga", "camping", "mountains", "rivers",
    "deserts", "the Olympic Games", "movies", "video games", "robots", "space travel", "bees",
    "chemistry", "atoms", "the periodic table", "Paris", "London", "New York", "Africa", "India",
    "email etiquette", "cybersecurity", "passwords", "databases", "the history of computers",
)

ASKS = (
    "Write one question that someone might ask an assistant about {topic}. Reply with the question only.",
    "Ask me a question about {topic}.",
    "Write a short question about {topic} that begins with \"{word}\".",
    "Give me an interesting question about {topic}, and nothing else.",
    "Write a request that a student could send to a helpful assistant about {topic}.",
)
WORDS = ("What", "How", "Why", "Can you", "Explain", "Which", "Is it", "Tell me", "Write", "Describe")

# Questions as people type them, from forms and subjects (`template_questions`). Why: a 135M model
# asked to write a question mostly rambles ("One of the most intriguing questions in all of
# physics. How about that, ..."), so a drafter trained only on answers to its own questions met
# another distribution on a visitor's prompt: its α on the card's hand-written prompts is well
# below its α on questions the target wrote. A GPU run's pools (`specdec chat-train --questions
# mixed`) are what this is for; `specdec chat-alpha` measures the three kinds of prompt.
# No form or subject here is one of the card's prompts (`measure.CHAT_PROMPTS`, held out; a test
# checks it).
FORMS = (
    "What is {topic}?", "Tell me about {topic}.", "Explain {topic} in simple terms.", "Why is {topic} important?",
    "What are the most important facts about {topic}?", "Give me {n} tips about {topic}.",
    "What are the pros and cons of {topic}?", "Write a short poem about {topic}.",
    "Write a short story that involves {topic}.", "Summarize the history of {topic} in a few sentences.",
    "What do people often get wrong about {topic}?", "How would you explain {topic} to a child?",
    "What should a beginner know about {topic}?", "Can you give me a fun fact about {topic}?",
    "Write a paragraph about {topic} for a school essay.", "List {n} things I should know about {topic}.",
    "How has {topic} changed over time?", "Describe {topic} in one paragraph.",
    "What is the difference between {topic} and {other}?", "I am curious about {topic}. Where should I start?",
)
TASK_FORMS = (
    "How do I {task}?", "Can you help me {task}?", "What is the best way to {task}?", "What do I need to {task}?",
    "Give me step-by-step instructions to {task}.", "I want to {task}. Any advice?",
    "What mistakes should I avoid when I {task}?", "How long does it take to {task}?",
)
TASKS = (
    "bake cookies", "change a flat tire", "learn to swim", "write a cover letter", "plant tomatoes",
    "start a budget", "train a puppy", "clean a laptop keyboard", "prepare for an exam", "make friends in a new city",
    "ask for a raise", "improve my handwriting", "choose a laptop", "cook rice", "fall asleep faster",
    "stop procrastinating", "learn to draw", "write a thank-you note", "organize my closet", "save for a vacation",
    "reduce stress", "speak more confidently", "learn to play guitar", "care for a houseplant", "make a smoothie",
    "back up my photos", "plan a birthday party", "memorize a speech", "start running", "write a haiku",
    "learn to code", "fix a leaking tap", "paint a room", "make pancakes", "prepare for a job interview",
    "write a short story", "learn chess openings", "grow herbs indoors", "set up a home network", "read faster",
)
NUMBERS = ("three", "five", "a few", "two", "four")


def chat_prompt(tokenizer, user_text: str) -> list[int]:
    """The ids of one user turn under the target's chat template, ready for the assistant's answer."""
    out = tokenizer.apply_chat_template([{"role": "user", "content": user_text}], add_generation_prompt=True,
                                        tokenize=True)
    return list(out["input_ids"] if hasattr(out, "keys") else out)


def ask_texts(count: int, generator: torch.Generator) -> list[str]:
    """`count` requests asking the target to write a question, drawn from TOPICS × ASKS × WORDS."""
    picks = torch.randint(0, 1 << 30, (count, 3), generator=generator).tolist()
    return [ASKS[a % len(ASKS)].format(topic=TOPICS[t % len(TOPICS)], word=WORDS[w % len(WORDS)])
            for t, a, w in picks]


@torch.no_grad()
def sample_rows(target, prompts: list[list[int]], length: int, temperature: float, eos: int,
                generator: torch.Generator, keep_features: bool = True) -> dict[str, torch.Tensor]:
    """Continue each prompt (0 = greedy) until `length` tokens or every row has ended at `eos`.
    ids [B, L] (eos after a row's end), starts / ends [B] (prompt length; one past the first
    sampled eos, or L), and when `keep_features`: feats [B, L, d], lse and top [B, L] of the
    target's logits at every position (the distribution of the token at position + 1)."""
    from transformers import DynamicCache

    b = len(prompts)
    device = target.get_input_embeddings().weight.device   # the rows live where the target does
    starts = torch.tensor([len(p) for p in prompts], device=device)
    if int(starts.max()) >= length:
        raise ValueError(f"a prompt of {int(starts.max())} tokens leaves no room in {length}")
    ids = torch.full((b, length), eos, dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, :len(p)] = torch.tensor(p)
    ids = ids.to(device)
    ends = torch.full((b,), length, device=device)
    out = {"ids": ids, "starts": starts, "ends": ends}
    if keep_features:
        out |= {"feats": torch.zeros(b, length, target.config.hidden_size, device=device),
                "lse": torch.zeros(b, length, device=device),
                "top": torch.zeros(b, length, dtype=torch.long, device=device)}
    if device.type != "cpu":   # a CPU generator cannot sample device tensors: one seeded from it
        seed = int(torch.randint(0, 1 << 62, (1,), generator=generator))
        generator = torch.Generator(device=device).manual_seed(seed)
    cache = DynamicCache(config=target.config)
    first = int(starts.min())

    def keep(a: int, logits: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        z = logits.float()
        if keep_features:
            out["feats"][:, a:a + z.shape[1]] = rows
            out["lse"][:, a:a + z.shape[1]] = torch.logsumexp(z, -1)
            out["top"][:, a:a + z.shape[1]] = z.argmax(-1)
        return z[:, -1]

    z = keep(0, *fx.forward_with_features(target, ids[:, :first], cache))
    for pos in range(first, length):
        if temperature == 0:
            nxt = z.argmax(-1)
        else:
            nxt = torch.multinomial(torch.softmax(z / temperature, -1), 1, generator=generator).squeeze(1)
        live = (pos >= starts) & (ends == length)
        ids[:, pos] = torch.where(pos < starts, ids[:, pos], torch.where(live, nxt, eos))
        ends[live & (nxt == eos)] = pos + 1
        if bool((ends < length).all()) or pos + 1 == length:
            break
        z = keep(pos, *fx.forward_with_features(target, ids[:, pos:pos + 1], cache))
    return out


def template_questions(count: int, generator: torch.Generator) -> list[str]:
    """`count` questions a visitor might type, from FORMS × TOPICS and TASK_FORMS × TASKS (a third
    of them about a task), seeded by `generator`."""
    picks = torch.randint(0, 1 << 30, (count, 4), generator=generator).tolist()
    out = []
    for a, b, c, d in picks:
        if a % 3 == 0:
            out.append(TASK_FORMS[b % len(TASK_FORMS)].format(task=TASKS[c % len(TASKS)]))
            continue
        topic, other = TOPICS[c % len(TOPICS)], TOPICS[d % len(TOPICS)]
        out.append(FORMS[b % len(FORMS)].format(topic=topic, other=other, n=NUMBERS[d % len(NUMBERS)]))
    return [q[0].upper() + q[1:] for q in out]


def question_of(tokenizer, ids: torch.Tensor, start: int, end: int) -> str:
    """The text the target wrote for a question, tidied: quotes and a leading 'Question:' dropped."""
    text = tokenizer.decode(ids[start:end].tolist(), skip_special_tokens=True).strip().strip('"').strip()
    for lead in ("Question:", "Q:"):
        if text.startswith(lead):
            text = text[len(lead):].strip()
    return text


def write_questions(target, tokenizer, count: int, generator: torch.Generator, batch: int = 64,
                    length: int = 40, temperature: float = 0.7) -> list[str]:
    """`count` questions the target writes itself (at `temperature`: at T = 1 a 135M model rambles
    more than it asks), at most `length` tokens each."""
    eos = tokenizer.eos_token_id
    questions: list[str] = []
    while len(questions) < count:
        prompts = [chat_prompt(tokenizer, a) for a in ask_texts(batch, generator)]
        got = sample_rows(target, prompts, max(map(len, prompts)) + length, temperature, eos, generator,
                          keep_features=False)
        for i in range(batch):
            text = question_of(tokenizer, got["ids"][i], int(got["starts"][i]), int(got["ends"][i]))
            if 8 <= len(text) <= 400:
                questions.append(text)
    return questions[:count]


def prompts_for(tokenizer, questions: list[str], kind: str, generator: torch.Generator,
                max_prompt: int) -> list[list[int]]:
    """'chat': each question as a user turn under the chat template; 'text': the question's first
    words as raw text for the target to continue (no template). A prompt longer than `max_prompt`
    tokens has its question cut from the end until it fits."""
    out = []
    for q in questions:
        words = tokenizer(q, add_special_tokens=False)["input_ids"]
        if kind == "text":
            n = int(torch.randint(3, max(4, len(words)) + 1, (1,), generator=generator))
            out.append(list(words[:min(n, max_prompt)]))
            continue
        prompt = chat_prompt(tokenizer, q)
        while len(prompt) > max_prompt and words:
            words = words[:max(0, len(words) - (len(prompt) - max_prompt))]
            prompt = chat_prompt(tokenizer, tokenizer.decode(words))
        if len(prompt) > max_prompt:
            raise ValueError(f"the chat template alone takes {len(prompt)} tokens, over {max_prompt}")
        out.append(prompt)
    return out


QUESTIONS = ("model", "templates", "mixed")


def draw_chat_pool(target, tokenizer, chunks: int, uses: tuple[tuple[str, float], ...], length: int, seed: int,
                   path: Path, log=print, batch: int = 32, text_every: int = 4, questions: str = "model"
                   ) -> dict[str, torch.Tensor]:
    """`chunks` chunks of `batch` questions, each question then used per `uses` ((kind 'chat' or
    'text', temperature) pairs; 'text' uses only every `text_every`-th chunk). `questions`: who
    writes them: 'model' (the target), 'templates' (`template_questions`), 'mixed' (templates in
    even chunks, the target in odd ones). Each chunk is seeded on its own and saved as it
    completes: a cut-off draw resumes."""
    if questions not in QUESTIONS:
        raise ValueError(f"questions must be one of {QUESTIONS}, got {questions!r}")
    parts = torch.load(path) if path is not None and path.exists() else []
    eos = tokenizer.eos_token_id
    for k in range(chunks):
        if k < len(parts):
            continue
        t0 = time.perf_counter()
        gen = torch.Generator().manual_seed(seed * 1_000_003 + k)
        templated = questions == "templates" or (questions == "mixed" and k % 2 == 0)
        texts = (template_questions(batch, gen) if templated
                 else write_questions(target, tokenizer, batch, gen, batch=batch))
        rows = []
        for kind, temp in uses:
            if kind == "text" and k % text_every:
                continue
            prompts = prompts_for(tokenizer, texts, kind, gen, length // 2)   # half a row at most
            got = sample_rows(target, prompts, length, temp, eos, gen)
            got["temps"] = torch.full((batch,), float(temp), device=got["ids"].device)
            rows.append(got)
        parts.append({key: torch.cat([r[key] for r in rows]) for key in rows[0]})
        if path is not None:   # None: kept in memory only (a GPU's pools would take long to save each chunk)
            torch.save(parts, path)
        log(f"{path.name if path is not None else 'pool'}: chunk {k + 1}/{chunks} ({len(parts[-1]['ids'])} rows) "
            f"in {time.perf_counter() - t0:.0f} s")
    return {key: torch.cat([p[key] for p in parts]) for key in parts[0]}
