"""A deterministic generator of synthetic math reasoning traces for the offline demo and small test fixtures.

Every problem and every chain of thought here is written by this project from templates: eighteen
word-problem templates (shopping, rates, ages, areas, percentages, sequences, fractions, work problems,
unit conversion, simple algebra, ...) filled with random names, objects and numbers, each with several
phrasings. All arithmetic is computed in Python, so every "a * b = c" written in a trace is correct and
the final answer matches the problem. No real data is copied from anywhere.

The traces imitate a reasoning model: a "<think>" opener, restated phrases of the problem (so copying
from the prompt helps a drafter), worked steps, sometimes a check or a repeated sentence of their own
(so prefix copying has something to find), and a closing "<answer>" tag or "\\boxed{}" answer.

The table has the seed dataset's columns: problem, problem_source, raw_reasoning and split. The same
(n_traces, seed) always gives the same table; splits are made per problem text, which is unique, so no
problem appears in two splits.
"""

from __future__ import annotations

import math
import pathlib
import random
from collections.abc import Callable

import pyarrow as pa
import pyarrow.parquet as pq

from specdraft.errors import SpecdraftError
from specdraft.files import atomic_path

Eq = Callable[[int, str, int], tuple[int, str]]
# A template returns (problem sentences, reasoning steps, answer, verification sentence).
Template = Callable[[random.Random, Eq], tuple[list[str], list[str], str, str]]

NAMES = (
    "Ava", "Ben", "Carla", "Dev", "Elena", "Farid", "Grace", "Hiro", "Ines", "Jamal", "Kira", "Leo", "Maya",
    "Nikhil", "Olga", "Pedro", "Quinn", "Rosa", "Sam", "Tara", "Umar", "Vera", "Wes", "Ximena", "Yusuf",
    "Zoe", "Aiko", "Bruno", "Chloe", "Diego", "Emma", "Felix", "Gita", "Hugo", "Iris", "Jonas", "Lena",
    "Marco", "Nora", "Oscar",
)
ITEMS = (
    ("notebook", "notebooks"), ("pencil", "pencils"), ("apple", "apples"), ("sticker", "stickers"),
    ("muffin", "muffins"), ("comic book", "comic books"), ("candle", "candles"), ("toy car", "toy cars"),
    ("mug", "mugs"), ("plant", "plants"), ("scarf", "scarves"), ("puzzle", "puzzles"),
)
THINGS = ("marbles", "stamps", "seashells", "baseball cards", "beads", "coins", "buttons", "postcards")
OPENERS = (
    "<think>\nOkay, let's see.", "<think>\nOkay, so I need to solve this problem.",
    "<think>\nAlright, let's tackle this step by step.", "<think>\nLet me try to figure this out.",
    "<think>\nHmm, okay. Let me think about this.",
    "<think>\nOkay, let me start by understanding the problem.",
)
HEDGES = (
    "Wait, let me double-check that.", "Hmm, let me make sure that's right.", "Let me re-check this step.",
    "Wait, is that right? Let me see again.",
)
PLANS = (
    "Let me break this down step by step.", "I need to work out the pieces one at a time.",
    "First, let me figure out what I actually need to compute.", "Let's start with what we know.",
)
FILLERS = (
    "Okay, that part is done.", "Now the next part.", "That seems right.", "Good, so far so good.",
    "Okay, moving on.", "Right.", "Let me keep going.",
)
SUMMARIES = ("So the answer is {a}.", "Therefore, the answer is {a}.", "So that gives {a}.",
             "So the final answer should be {a}.")
CLOSINGS = (
    "</think>\n<answer> {a} </answer>", "</think>\n\nThe final answer is \\boxed{{{a}}}.",
    "</think>\n\n**Final Answer**\n\\boxed{{{a}}}", "</think>\n<answer>{a}</answer>",
)
SOURCES = ("synthetic/arithmetic", "synthetic/word-problems", "synthetic/algebra", "synthetic/geometry")


def make_eq(rng: random.Random) -> Eq:
    """An equation writer with one style per trace; it computes the result, so the text is always right."""
    latex = rng.random() < 0.35

    def eq(a: int, op: str, b: int) -> tuple[int, str]:
        if op == "/" and (b == 0 or a % b):
            raise ValueError(f"inexact division {a} / {b}")
        value = {"+": a + b, "-": a - b, "*": a * b, "/": a // b if b else 0}[op]
        sym = {"*": "\\times", "/": "\\div"}.get(op, op) if latex else op
        text = f"{a} {sym} {b} = {value}"
        return value, f"${text}$" if latex else text

    return eq


def _shopping(r: random.Random, eq: Eq) -> tuple[list[str], list[str], str, str]:
    name = r.choice(NAMES)
    (_, i1), (_, i2) = r.sample(ITEMS, 2)
    q1, p1, q2, p2 = r.randint(2, 9), r.randint(2, 15), r.randint(2, 9), r.randint(2, 15)
    c1, s1 = eq(q1, "*", p1)
    c2, s2 = eq(q2, "*", p2)
    total, s3 = eq(c1, "+", c2)
    bill = next(b for b in (20, 50, 100, 200, 500) if b > total)
    change, s4 = eq(bill, "-", total)
    buy = r.choice((f"{name} buys {q1} {i1} for ${p1} each and {q2} {i2} for ${p2} each.",
                    f"At the market, {name} picks up {q1} {i1} at ${p1} each and {q2} {i2} at ${p2} each."))
    pay = r.choice((f"{name} pays with a ${bill} bill.", f"{name} hands the cashier ${bill}."))
    ask = r.choice((f"How much change should {name} get back?", f"How much change does {name} receive?"))
    steps = [f"The {i1} cost {s1} dollars.", f"The {i2} cost {s2} dollars.",
             f"So the total is {s3} dollars.", f"{name} paid ${bill}, so the change is {s4} dollars."]
    return [buy, pay, ask], steps, str(change), f"{total} + {change} = {bill}, which matches the bill."


def _distance(r: random.Random, eq: Eq) -> tuple[list[str], list[str], str, str]:
    name, v = r.choice(NAMES), r.choice(("car", "bike", "train", "bus", "boat"))
    s1, t1, t2 = r.randint(20, 80), r.randint(1, 6), r.randint(1, 5)
    s2 = r.randint(10, s1 - 5)
    d1, a = eq(s1, "*", t1)
    d2, b = eq(s2, "*", t2)
    d, c = eq(d1, "+", d2)
    text = [r.choice((f"{name} travels by {v} at {s1} miles per hour for {t1} hours.",
                      f"{name}'s {v} travels for {t1} hours at a steady {s1} miles per hour.")),
            f"Then the {v} slows down to {s2} miles per hour for another {t2} hours.",
            r.choice(("How many miles does it travel in total?", "What is the total distance in miles?"))]
    steps = ["Distance equals speed times time.", f"For the first part: {a} miles.",
             f"For the second part: {b} miles.", f"Adding them: {c} miles."]
    return text, steps, str(d), f"{d} - {d2} = {d1}, which is the first leg, so it adds up."


def _ages(r: random.Random, eq: Eq) -> tuple[list[str], list[str], str, str]:
    a, b = r.sample(NAMES, 2)
    young, k, y = r.randint(3, 15), r.randint(2, 4), r.randint(2, 12)
    old, s1 = eq(young, "*", k)
    old_future, s2 = eq(old, "+", y)
    young_future, s3 = eq(young, "+", y)
    total, s4 = eq(old_future, "+", young_future)
    frac = ("", "", "half", "third", "fourth")[k]
    text = [r.choice((f"{a} is {k} times as old as {b}.", f"{b}'s age is one-{frac} of {a}'s age.")),
            f"{b} is {young} years old.",
            r.choice((f"What will be the sum of their ages in {y} years?",
                      f"In {y} years, how old will {a} and {b} be altogether?"))]
    steps = [f"{b} is {young}, so {a} is {s1} years old now.", f"In {y} years, {a} will be {s2}.",
             f"In {y} years, {b} will be {s3}.", f"Together that is {s4}."]
    return text, steps, str(total), f"{old} is {k} times {young}, and both ages grow by {y}, so it is right."


def _rect_area(r: random.Random, eq: Eq) -> tuple[list[str], list[str], str, str]:
    name, place = r.choice(NAMES), r.choice(("garden", "patio", "rug", "classroom floor", "field", "poster"))
    length, width = r.randint(5, 60), r.randint(3, 40)
    area, s1 = eq(length, "*", width)
    text = [r.choice((f"{name}'s rectangular {place} is {length} meters long and {width} meters wide.",
                      f"A rectangular {place} measures {length} meters by {width} meters.")),
            r.choice((f"What is the area of the {place} in square meters?",
                      "How many square meters does it cover?"))]
    steps = ["The area of a rectangle is length times width.", f"So the area is {s1} square meters."]
    return text, steps, str(area), f"{area} / {width} = {length}, the length, so that checks out."


def _fence(r: random.Random, eq: Eq) -> tuple[list[str], list[str], str, str]:
    name = r.choice(NAMES)
    length, width, cost = r.randint(6, 50), r.randint(4, 30), r.randint(3, 25)
    half, s1 = eq(length, "+", width)
    per, s2 = eq(2, "*", half)
    total, s3 = eq(per, "*", cost)
    text = [f"{name} wants to fence a rectangular yard that is {length} feet long and {width} feet wide.",
            r.choice((f"Fencing costs ${cost} per foot.", f"Each foot of fence costs ${cost}.")),
            r.choice(("How much will the fence cost?", f"How many dollars will {name} spend on fencing?"))]
    steps = [f"The perimeter is 2 times (length + width). First, {s1}.", f"Then {s2} feet of fence.",
             f"At ${cost} per foot, the cost is {s3} dollars."]
    return text, steps, str(total), f"{total} / {cost} = {per} feet, which is the perimeter."


def _discount(r: random.Random, eq: Eq) -> tuple[list[str], list[str], str, str]:
    name, (item, _) = r.choice(NAMES), r.choice(ITEMS)
    price, pct = 20 * r.randint(2, 30), 5 * r.randint(1, 12)
    tenth, s1 = eq(price, "*", pct)
    off, s2 = eq(tenth, "/", 100)
    final, s3 = eq(price, "-", off)
    text = [r.choice((f"A {item} normally costs ${price}.", f"The regular price of a {item} is ${price}.")),
            r.choice((f"It is on sale for {pct}% off.", f"The store offers a {pct}% discount on it.")),
            r.choice((f"How much does {name} pay for the {item} on sale?",
                      "What is the sale price in dollars?"))]
    steps = [f"{pct}% of {price} is {price} * {pct} / 100.", f"{s1}, and {s2} dollars off.",
             f"So the sale price is {s3} dollars."]
    return text, steps, str(final), f"{final} + {off} = {price}, the original price."


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _seq_term(r: random.Random, eq: Eq) -> tuple[list[str], list[str], str, str]:
    a, d, n = r.randint(1, 30), r.randint(2, 12), r.randint(8, 60)
    terms = ", ".join(str(a + i * d) for i in range(4))
    m, s1 = eq(n, "-", 1)
    step, s2 = eq(m, "*", d)
    val, s3 = eq(a, "+", step)
    text = [r.choice((f"Consider the arithmetic sequence {terms}, ...",
                      f"A sequence starts {terms}, and so on.")),
            r.choice((f"What is the {_ordinal(n)} term?", f"Find term number {n} of the sequence."))]
    steps = [f"The first term is {a} and the common difference is {d}.",
             f"The nth term is a + (n - 1)d. Here {s1}.", f"Then {s2}.", f"So the term is {s3}."]
    return text, steps, str(val), f"term 2 would be {a} + {d} = {a + d}, which matches the list."


def _seq_sum(r: random.Random, eq: Eq) -> tuple[list[str], list[str], str, str]:
    name = r.choice(NAMES)
    a, d, n = r.randint(1, 20), r.randint(1, 6), r.randint(5, 30)
    last, s1 = eq(a, "+", (n - 1) * d)
    pair, s2 = eq(a, "+", last)
    prod, s3 = eq(n, "*", pair)
    total, s4 = eq(prod, "/", 2)
    text = [f"{name} saves ${a} on the first day and ${d} more each day than the day before.",
            r.choice((f"How much has {name} saved after {n} days?",
                      f"What is the total saved over {n} days?"))]
    steps = [f"This is an arithmetic series with first term {a}, difference {d}, and {n} terms.",
             f"The last term is {a} + {n - 1} * {d}, so {s1}.", f"Sum = n(first + last)/2. First {s2}.",
             f"Then {s3}.", f"Dividing by 2: {s4}."]
    return text, steps, str(total), f"the average day is {pair}/2 and there are {n} days, so it fits."


def _fractions(r: random.Random, eq: Eq) -> tuple[list[str], list[str], str, str]:
    a, b = r.sample(NAMES, 2)
    thing = r.choice(THINGS)
    d1, d2 = r.choice((2, 3, 4, 5)), r.choice((2, 3, 4))
    n1, n2 = r.randint(1, d1 - 1), r.randint(1, d2 - 1)
    total = d1 * d2 * r.randint(2, 12)
    part, s1 = eq(total, "/", d1)
    give1, s2 = eq(part, "*", n1)
    left1, s3 = eq(total, "-", give1)
    part2, s4 = eq(left1, "/", d2)
    give2, s5 = eq(part2, "*", n2)
    left, s6 = eq(left1, "-", give2)
    text = [f"{a} has {total} {thing}.", f"{a} gives \\frac{{{n1}}}{{{d1}}} of them to {b}.",
            f"Then {a} gives \\frac{{{n2}}}{{{d2}}} of the remaining {thing} to a cousin.",
            r.choice((f"How many {thing} does {a} have left?", f"How many {thing} are left with {a}?"))]
    steps = [f"First, \\frac{{{n1}}}{{{d1}}} of {total}: {s1}, and {s2}.", f"So {a} has {s3} left.",
             f"Next, \\frac{{{n2}}}{{{d2}}} of {left1}: {s4}, and {s5}.", f"Now {s6} {thing} remain."]
    return text, steps, str(left), f"{left} + {give2} + {give1} = {total}, all the {thing}."


def _work(r: random.Random, eq: Eq) -> tuple[list[str], list[str], str, str]:
    a, b = r.sample(NAMES, 2)
    k = r.randint(1, 8)
    ta, tb = (x * k for x in r.choice(((3, 6), (4, 12), (6, 12), (10, 15), (6, 3), (12, 4), (2, 2), (5, 20))))
    job = r.choice(("paint the fence", "clean the house", "mow the lawn", "stack the boxes", "wash the cars"))
    prod, s1 = eq(ta, "*", tb)
    summ, s2 = eq(ta, "+", tb)
    together, s3 = eq(prod, "/", summ)
    text = [f"{a} can {job} alone in {ta} hours.", f"{b} can {job} alone in {tb} hours.",
            r.choice(("How many hours does it take if they work together?",
                      f"Working together, how long do {a} and {b} need?"))]
    steps = [f"{a} does \\frac{{1}}{{{ta}}} of the job per hour and {b} does \\frac{{1}}{{{tb}}}.",
             f"Together the time is ab/(a + b). So {s1} and {s2}.", f"Then {s3} hours."]
    return text, steps, str(together), f"in {together} hours they do {together}/{ta} + {together}/{tb} of it."


def _minutes(r: random.Random, eq: Eq) -> tuple[list[str], list[str], str, str]:
    name, act = r.choice(NAMES), r.choice(("practices piano", "jogs", "reads", "studies Spanish", "swims"))
    while True:
        m, d, w = r.choice((15, 20, 30, 40, 45, 50, 60, 75, 90)), r.randint(2, 7), r.randint(2, 12)
        if (m * d * w) % 60 == 0:
            break
    day, s1 = eq(m, "*", d)
    mins, s2 = eq(day, "*", w)
    hours, s3 = eq(mins, "/", 60)
    text = [f"{name} {act} for {m} minutes a day, {d} days a week.",
            r.choice((f"How many hours is that over {w} weeks?",
                      f"In {w} weeks, how many hours does this add up to?"))]
    steps = [f"Each week is {s1} minutes.", f"Over {w} weeks: {s2} minutes.",
             f"There are 60 minutes in an hour, so {s3} hours."]
    return text, steps, str(hours), f"{hours} * 60 = {mins} minutes, as computed."


def _think_number(r: random.Random, eq: Eq) -> tuple[list[str], list[str], str, str]:
    name, x, a, b = r.choice(NAMES), r.randint(2, 40), r.randint(2, 9), r.randint(1, 50)
    c = a * x + b
    t, s1 = eq(c, "-", b)
    val, s2 = eq(t, "/", a)
    text = r.choice(([f"{name} thinks of a number, multiplies it by {a}, and then adds {b}.",
                      f"The result is {c}. What was the number?"],
                     [f"If you multiply a number by {a} and add {b}, you get {c}.", "What is the number?"]))
    steps = [f"Let the number be x. Then {a}x + {b} = {c}.", f"Subtract {b}: {s1}, so {a}x = {t}.",
             f"Divide by {a}: {s2}."]
    return text, steps, str(val), f"{a} * {x} + {b} = {c}."


def _sum_diff(r: random.Random, eq: Eq) -> tuple[list[str], list[str], str, str]:
    y, dd = r.randint(3, 80), r.randint(1, 40)
    x = y + dd
    s, _ = eq(x, "+", y)
    twice, s1 = eq(s, "+", dd)
    big, s2 = eq(twice, "/", 2)
    text = [r.choice((f"Two numbers add up to {s} and differ by {dd}.",
                      f"The sum of two numbers is {s} and their difference is {dd}.")),
            r.choice(("What is the larger number?", "Find the larger of the two numbers."))]
    steps = [f"Let the numbers be x and y with x + y = {s} and x - y = {dd}.",
             f"Adding the equations: 2x = {s1}.", f"So x = {s2}."]
    return text, steps, str(big), f"the other number is {s} - {big} = {y}, and {big} - {y} = {dd}."


def _average(r: random.Random, eq: Eq) -> tuple[list[str], list[str], str, str]:
    name = r.choice(NAMES)
    while True:
        scores, target = [r.randint(60, 100) for _ in range(4)], r.randint(70, 95)
        if 40 <= 5 * target - sum(scores) <= 100:
            break
    total, s1 = eq(5, "*", target)
    run = scores[0]
    adds = []
    for sc in scores[1:]:
        run, s = eq(run, "+", sc)
        adds.append(s)
    ans, s3 = eq(total, "-", run)
    text = [f"{name} scored {', '.join(map(str, scores))} on four tests.",
            r.choice((f"What score does {name} need on the fifth test to average {target}?",
                      f"To have an average of {target} over five tests, what must the fifth score be?"))]
    steps = [f"An average of {target} over 5 tests means a total of {s1}.",
             f"The first four add up: {', '.join(adds)}.",
             f"So the fifth score must be {s3}."]
    return text, steps, str(ans), f"({run} + {ans}) / 5 = {target}."


def _triangle(r: random.Random, eq: Eq) -> tuple[list[str], list[str], str, str]:
    base, h = 2 * r.randint(2, 40), r.randint(3, 60)
    thing = r.choice(("sail", "flag", "garden bed", "roof gable", "banner", "tile"))
    prod, s1 = eq(base, "*", h)
    area, s2 = eq(prod, "/", 2)
    text = [r.choice((f"A triangle has a base of {base} cm and a height of {h} cm.",
                      f"The base of a triangular {thing} is {base} cm and its height is {h} cm.")),
            "What is its area in square centimeters?"]
    steps = ["The area of a triangle is \\frac{1}{2} times base times height.", f"{s1}.",
             f"Half of that: {s2}."]
    return text, steps, str(area), f"2 * {area} = {prod} = {base} * {h}."


def _ratio(r: random.Random, eq: Eq) -> tuple[list[str], list[str], str, str]:
    a, b, k = r.randint(1, 9), r.randint(1, 9), r.randint(2, 15)
    group = r.choice(("class", "club", "choir", "team", "camp"))
    parts, s1 = eq(a, "+", b)
    total = parts * k
    per, s2 = eq(total, "/", parts)
    girls, s3 = eq(b, "*", per)
    text = [f"In a {group}, the ratio of boys to girls is {a}:{b}.",
            f"There are {total} students in the {group}.",
            r.choice(("How many girls are there?", f"How many girls are in the {group}?"))]
    steps = [f"The ratio has {s1} parts.", f"Each part is {s2} students.", f"Girls are {b} parts: {s3}."]
    return text, steps, str(girls), f"boys are {a} * {per} = {a * per}, and {a * per} + {girls} = {total}."


def _weeks(r: random.Random, eq: Eq) -> tuple[list[str], list[str], str, str]:
    name, item = r.choice(NAMES), r.choice(("a bike", "a tablet", "a guitar", "a telescope", "new skates"))
    have, per, goal = r.randint(0, 60), r.randint(5, 30), r.randint(100, 600)
    need, s1 = eq(goal, "-", have)
    weeks = math.ceil(need / per)
    _, s2 = eq(weeks, "*", per)
    text = [f"{name} wants to buy {item} that costs ${goal} and already has ${have}.",
            f"{name} saves ${per} every week.",
            r.choice((f"How many weeks until {name} has enough?",
                      "What is the fewest number of weeks needed?"))]
    steps = [f"{name} still needs {s1} dollars.", (f"{need} / {per} is exactly {weeks}." if need % per == 0
              else f"{need} / {per} is about {need / per:.2f}, so round up to {weeks}."),
             f"Check: {s2}, which is at least {need}."]
    return text, steps, str(weeks), f"{weeks - 1} weeks give only {(weeks - 1) * per}, less than {need}."


def _buses(r: random.Random, eq: Eq) -> tuple[list[str], list[str], str, str]:
    a, b = r.sample(range(4, 31), 2)
    v, hour = r.choice(("bus", "train", "ferry", "shuttle")), r.randint(6, 11)
    g = math.gcd(a, b)
    prod, s1 = eq(a, "*", b)
    lcm, s2 = eq(prod, "/", g)
    text = [f"One {v} leaves the station every {a} minutes and another every {b} minutes.",
            f"They both leave at {hour}:00.",
            r.choice(("After how many minutes will they next leave together?",
                      "In how many minutes do they meet again?"))]
    steps = ["This is the least common multiple.", f"The gcd of {a} and {b} is {g}.",
             f"lcm = ab / gcd: {s1}, then {s2}."]
    return text, steps, str(lcm), f"{lcm} / {a} = {lcm // a} and {lcm} / {b} = {lcm // b}, both whole."


TEMPLATES: dict[str, Template] = {
    "shopping": _shopping, "distance": _distance, "ages": _ages, "rect_area": _rect_area, "fence": _fence,
    "discount": _discount, "seq_term": _seq_term, "seq_sum": _seq_sum, "fractions": _fractions, "work": _work,
    "minutes": _minutes, "think_number": _think_number, "sum_diff": _sum_diff, "average": _average,
    "triangle": _triangle, "ratio": _ratio, "weeks": _weeks, "buses": _buses,
}
_TEMPLATE_NAMES = tuple(TEMPLATES)


def _reasoning(r: random.Random, text: list[str], steps: list[str], answer: str, check: str) -> str:
    """Wrap a template's steps in a model-like chain of thought."""
    out = [r.choice(OPENERS)]
    if r.random() < 0.5:
        out.append("The problem says: " + " ".join(text))
    else:
        out.append(f"So, basically: {text[0]} The question is: {text[-1]}")
    if r.random() < 0.35:
        out.append("Let me write down what we know:\n" + "\n".join(f"- {t}" for t in text[:-1]))
    if r.random() < 0.6:
        out.append(r.choice(PLANS))
    for i, step in enumerate(steps):
        out.append(step)
        if i and r.random() < 0.12:  # models repeat their own sentences
            out += [r.choice(HEDGES), steps[i - 1], step]
        elif i < len(steps) - 1 and r.random() < 0.3:
            out.append(r.choice(FILLERS))
    if r.random() < 0.6:
        out.append(r.choice(("Let me verify: ", "Let me double-check: ", "Checking: ")) + check)
    passes = 0
    while r.random() < 0.2 and passes < 3:  # long traces: re-read and redo the whole thing
        passes += 1
        reread = " ".join(text[: r.randint(1, len(text))])
        out += ["Hmm, let me go through it once more to be sure. " + reread, *steps]
    if r.random() < 0.3:
        out.append(f"Wait, the question asks: {text[-1]} Yes, that is what I computed.")
    out.append(r.choice(SUMMARIES).format(a=answer))
    sep = r.choice(("\n\n", "\n", " "))
    return sep.join(out) + "\n" + r.choice(CLOSINGS).format(a=answer)


def generate_problems(n: int, seed: int = 0) -> list[dict]:
    """n records with unique problem text: template, problem, problem_source, answer, raw_reasoning."""
    rng = random.Random(seed)
    seen: set[str] = set()
    records: list[dict] = []
    while len(records) < n:
        for _ in range(1000):
            name = rng.choice(_TEMPLATE_NAMES)
            text, steps, answer, check = TEMPLATES[name](rng, make_eq(rng))
            problem = " ".join(text)
            if problem not in seen:
                break
        else:
            raise SpecdraftError(f"could not generate {n} unique synthetic problems")
        seen.add(problem)
        source = rng.choice(SOURCES) if rng.random() < 0.1 else None
        records.append({"template": name, "problem": problem, "problem_source": source, "answer": answer,
                        "raw_reasoning": _reasoning(rng, text, steps, answer, check)})
    return records


def _split_labels(n: int, rng: random.Random, eval_fraction: float, calibration_fraction: float,
                  max_heldout: int) -> list[str]:
    if not (0 <= eval_fraction and 0 <= calibration_fraction and eval_fraction + calibration_fraction < 1):
        raise SpecdraftError("eval and calibration fractions must be in [0, 1) and sum to less than 1")
    n_eval = min(round(n * eval_fraction), max_heldout)
    n_cal = min(round(n * calibration_fraction), max_heldout)
    if n >= 3:
        n_eval, n_cal = max(1, n_eval), max(1, n_cal)
        while n_eval + n_cal > n - 1:
            if n_eval >= n_cal:
                n_eval -= 1
            else:
                n_cal -= 1
    labels = ["eval"] * n_eval + ["calibration"] * n_cal + ["train"] * (n - n_eval - n_cal)
    rng.shuffle(labels)
    return labels


# Eval and calibration traces are capped: a big corpus grows the train split (what the tables
# index), while scoring stays the size of the seed's (256 eval traces).
MAX_HELDOUT = 500


def generate_traces(
    n_traces: int = 3000, seed: int = 0, eval_fraction: float = 0.05, calibration_fraction: float = 0.05,
    max_heldout: int = MAX_HELDOUT,
) -> pa.Table:
    """A table of n_traces synthetic traces: problem, problem_source, raw_reasoning, split (at most
    max_heldout eval and as many calibration traces)."""
    if n_traces < 0:
        raise SpecdraftError(f"n_traces must be >= 0, got {n_traces}")
    records = generate_problems(n_traces, seed)
    split_rng = random.Random(f"specdraft-splits-{seed}")
    splits = _split_labels(n_traces, split_rng, eval_fraction, calibration_fraction, max_heldout)
    return pa.table(
        {
            "problem": pa.array([rec["problem"] for rec in records], pa.string()),
            "problem_source": pa.array([rec["problem_source"] for rec in records], pa.string()),
            "raw_reasoning": pa.array([rec["raw_reasoning"] for rec in records], pa.string()),
            "split": pa.array(splits, pa.string()),
        }
    )


def write_traces_parquet(path: str | pathlib.Path, n_traces: int = 3000, seed: int = 0) -> pathlib.Path:
    """Write generate_traces(n_traces, seed) to a Parquet file and return its path."""
    out = pathlib.Path(path)
    with atomic_path(out) as partial:  # never a half-written file
        pq.write_table(generate_traces(n_traces, seed), partial)
    return out
