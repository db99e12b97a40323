"""Function families of the coding suite: a correct implementation, bugs, and tests.

Each family is one small function. ``body`` is its correct source with ``{fn}`` standing for
the function's name; each mutation ``(kind, old, new)`` replaces exactly one occurrence of
``old`` and turns it into a bug that at least one hidden test catches (``tests/taskset``
checks every generated task: the buggy code fails, the reference passes). Tests are
``assert`` expressions over ``{fn}``; ``_raises(exc, f, *args)`` is available to them.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["FAMILIES", "Family"]


@dataclass(frozen=True)
class Family:
    key: str
    names: tuple[str, str, str]
    modules: tuple[str, str, str]
    doc: str
    body: str
    mutations: tuple[tuple[str, str, str], ...]
    visible: tuple[str, ...]
    hidden: tuple[str, ...]


F = Family
FAMILIES: tuple[Family, ...] = (
    F(
        "clamp",
        ("clamp", "bound", "limit_value"),
        ("numeric", "ranges", "bounds"),
        "return value limited to the closed interval [low, high]",
        '''def {fn}(value, low, high):
    """Return value limited to the closed interval [low, high]."""
    if value < low:
        return low
    if value > high:
        return high
    return value
''',
        (
            ("wrong_comparison", "if value < low:", "if value > low:"),
            ("wrong_return", "        return high\n", "        return low\n"),
            ("off_by_one", "        return high\n", "        return high - 1\n"),
        ),
        ("{fn}(5, 0, 10) == 5", "{fn}(12, 0, 10) == 10"),
        (
            "{fn}(-3, 0, 10) == 0",
            "{fn}(15, 0, 10) == 10",
            "{fn}(7, 0, 10) == 7",
            "{fn}(10, 0, 10) == 10",
        ),
    ),
    F(
        "palindrome",
        ("is_palindrome", "reads_same_backwards", "check_palindrome"),
        ("text", "strings", "words"),
        "return True if text reads the same backwards, "
        "ignoring case and non-alphanumeric characters",
        '''def {fn}(text):
    """True if text reads the same backwards, ignoring case and non-alphanumerics."""
    cleaned = [c.lower() for c in text if c.isalnum()]
    return cleaned == cleaned[::-1]
''',
        (
            ("missing_normalisation", "[c.lower() for", "[c for"),
            ("missing_filter", " if c.isalnum()]", "]"),
            ("off_by_one", "cleaned[::-1]", "cleaned[1:][::-1]"),
        ),
        ("{fn}('racecar') is True",),
        (
            "{fn}('A man, a plan, a canal: Panama') is True",
            "{fn}('Noon') is True",
            "{fn}('abca') is False",
            "{fn}('abba') is True",
            "{fn}('') is True",
        ),
    ),
    F(
        "running_total",
        ("running_total", "cumulative_sum", "prefix_sums"),
        ("series", "sums", "accumulate"),
        "return the list of running totals of numbers",
        '''def {fn}(numbers):
    """Return the list of running totals of numbers."""
    totals = []
    acc = 0
    for n in numbers:
        acc += n
        totals.append(acc)
    return totals
''',
        (
            ("wrong_operator", "acc += n", "acc = n"),
            ("wrong_initial_value", "acc = 0", "acc = 1"),
            ("off_by_one", "for n in numbers:", "for n in numbers[1:]:"),
        ),
        ("{fn}([1, 2, 3]) == [1, 3, 6]",),
        (
            "{fn}([]) == []",
            "{fn}([5]) == [5]",
            "{fn}([2, -2, 4]) == [2, 0, 4]",
            "{fn}([0, 0, 1]) == [0, 0, 1]",
        ),
    ),
    F(
        "count_vowels",
        ("count_vowels", "vowel_count", "num_vowels"),
        ("letters", "phonetics", "textstats"),
        "return how many vowels (a, e, i, o, u, any case) text contains",
        '''VOWELS = "aeiou"


def {fn}(text):
    """Return how many vowels (a, e, i, o, u, any case) text contains."""
    return sum(1 for c in text.lower() if c in VOWELS)
''',
        (
            ("missing_normalisation", "text.lower()", "text"),
            ("wrong_constant", 'VOWELS = "aeiou"', 'VOWELS = "aeio"'),
            ("wrong_comparison", "if c in VOWELS", "if c not in VOWELS"),
        ),
        ("{fn}('hello') == 2",),
        ("{fn}('AEIOU') == 5", "{fn}('rhythm') == 0", "{fn}('Queue') == 4", "{fn}('') == 0"),
    ),
    F(
        "fizzbuzz",
        ("fizzbuzz", "fizz_buzz", "fizzbuzz_list"),
        ("games", "puzzles", "drills"),
        "return the FizzBuzz strings for 1..n",
        '''def {fn}(n):
    """Return the FizzBuzz strings for 1..n."""
    out = []
    for i in range(1, n + 1):
        if i % 15 == 0:
            out.append("FizzBuzz")
        elif i % 3 == 0:
            out.append("Fizz")
        elif i % 5 == 0:
            out.append("Buzz")
        else:
            out.append(str(i))
    return out
''',
        (
            ("off_by_one", "range(1, n + 1)", "range(1, n)"),
            ("wrong_constant", "i % 15 == 0", "i % 10 == 0"),
            ("wrong_comparison", "elif i % 3 == 0", "elif i % 3 == 1"),
        ),
        ("{fn}(3) == ['1', '2', 'Fizz']",),
        (
            "{fn}(5)[-1] == 'Buzz'",
            "{fn}(15)[-1] == 'FizzBuzz'",
            "{fn}(10)[9] == 'Buzz'",
            "len({fn}(7)) == 7",
            "{fn}(6)[5] == 'Fizz'",
        ),
    ),
    F(
        "gcd",
        ("gcd", "greatest_common_divisor", "highest_common_factor"),
        ("arith", "numbers", "divisors"),
        "return the greatest common divisor of a and b (always non-negative)",
        '''def {fn}(a, b):
    """Return the greatest common divisor of a and b (always non-negative)."""
    a, b = abs(a), abs(b)
    while b:
        a, b = b, a % b
    return a
''',
        (
            ("wrong_return", "    return a\n", "    return b\n"),
            ("missing_normalisation", "a, b = abs(a), abs(b)", "a, b = a, b"),
            ("wrong_comparison", "while b:", "while b > 1:"),
        ),
        ("{fn}(12, 8) == 4",),
        ("{fn}(7, 3) == 1", "{fn}(4, -6) == 2", "{fn}(0, 9) == 9", "{fn}(21, 14) == 7"),
    ),
    F(
        "factorial",
        ("factorial", "fact", "product_up_to"),
        ("combinatorics", "counting", "mathx"),
        "return n! for n >= 0 and raise ValueError for negative n",
        '''def {fn}(n):
    """Return n! for n >= 0; raise ValueError for negative n."""
    if n < 0:
        raise ValueError("n must be non-negative")
    result = 1
    for i in range(2, n + 1):
        result *= i
    return result
''',
        (
            ("off_by_one", "range(2, n + 1)", "range(2, n)"),
            ("wrong_initial_value", "result = 1", "result = 0"),
            ("wrong_comparison", "if n < 0:", "if n < 1:"),
        ),
        ("{fn}(4) == 24",),
        ("{fn}(0) == 1", "{fn}(1) == 1", "{fn}(5) == 120", "_raises(ValueError, {fn}, -1)"),
    ),
    F(
        "flatten",
        ("flatten", "flatten_list", "deep_flatten"),
        ("nesting", "lists", "structures"),
        "return the items of an arbitrarily nested list as one flat list, in order",
        '''def {fn}(items):
    """Return the items of an arbitrarily nested list as one flat list, in order."""
    out = []
    for item in items:
        if isinstance(item, list):
            out.extend({fn}(item))
        else:
            out.append(item)
    return out
''',
        (
            ("missing_recursion", "out.extend({fn}(item))", "out.extend(item)"),
            ("wrong_order", "out.append(item)", "out.insert(0, item)"),
            ("wrong_type_check", "isinstance(item, list)", "isinstance(item, tuple)"),
        ),
        ("{fn}([1, [2, 3]]) == [1, 2, 3]",),
        (
            "{fn}([1, [2, [3, [4]]]]) == [1, 2, 3, 4]",
            "{fn}([]) == []",
            "{fn}([[1], 2, [3]]) == [1, 2, 3]",
        ),
    ),
    F(
        "word_count",
        ("word_count", "count_words", "word_frequencies"),
        ("corpus", "tokens", "vocab"),
        "return a dict mapping each lowercased word (punctuation .,!?;: stripped) to its count",
        '''def {fn}(text):
    """Map each lowercased word (stripped of .,!?;:) to how often it occurs."""
    counts = {}
    for word in text.lower().split():
        word = word.strip(".,!?;:")
        if word:
            counts[word] = counts.get(word, 0) + 1
    return counts
''',
        (
            ("missing_normalisation", "text.lower().split()", "text.split()"),
            ("wrong_operator", "counts.get(word, 0) + 1", "1"),
            ("missing_filter", 'word.strip(".,!?;:")', "word"),
        ),
        ("{fn}('a b a') == {'a': 2, 'b': 1}",),
        (
            "{fn}('The cat. the CAT!') == {'the': 2, 'cat': 2}",
            "{fn}('') == {}",
            "{fn}('x x x') == {'x': 3}",
        ),
    ),
    F(
        "binary_search",
        ("binary_search", "find_index", "bisect_find"),
        ("search", "lookup", "sorted_ops"),
        "return the index of target in the sorted list items, or -1 if absent",
        '''def {fn}(items, target):
    """Return the index of target in the sorted list items, or -1 if absent."""
    lo, hi = 0, len(items) - 1
    while lo <= hi:
        mid = (lo + hi) // 2
        if items[mid] == target:
            return mid
        if items[mid] < target:
            lo = mid + 1
        else:
            hi = mid - 1
    return -1
''',
        (
            ("off_by_one", "while lo <= hi:", "while lo < hi:"),
            ("wrong_return", "    return -1\n", "    return None\n"),
            ("wrong_bounds", "lo, hi = 0, len(items) - 1", "lo, hi = 0, len(items) - 2"),
        ),
        ("{fn}([1, 3, 5, 7], 5) == 2",),
        (
            "{fn}([1, 3, 5, 7], 7) == 3",
            "{fn}([1, 3, 5, 7], 4) == -1",
            "{fn}([2], 2) == 0",
            "{fn}([], 1) == -1",
            "{fn}([1, 2, 3, 4, 5], 1) == 0",
        ),
    ),
    F(
        "rotate",
        ("rotate_left", "rotate", "shift_items"),
        ("sequences", "rotation", "cycles"),
        "return items rotated left by k positions (k may exceed the length)",
        '''def {fn}(items, k):
    """Return items rotated left by k positions (k may exceed the length)."""
    if not items:
        return []
    k %= len(items)
    return items[k:] + items[:k]
''',
        (
            ("wrong_order", "items[k:] + items[:k]", "items[:k] + items[k:]"),
            ("off_by_one", "k %= len(items)", "k %= len(items) + 1"),
            ("wrong_return", "        return []\n", "        return None\n"),
        ),
        ("{fn}([1, 2, 3, 4], 1) == [2, 3, 4, 1]",),
        ("{fn}([1, 2, 3], 3) == [1, 2, 3]", "{fn}([1, 2, 3], 4) == [2, 3, 1]", "{fn}([], 2) == []"),
    ),
    F(
        "unique",
        ("unique", "dedupe", "remove_duplicates"),
        ("collections_extra", "sets", "uniq"),
        "return items without duplicates, keeping the first occurrence order",
        '''def {fn}(items):
    """Return items without duplicates, keeping first-occurrence order."""
    seen = set()
    out = []
    for item in items:
        if item not in seen:
            seen.add(item)
            out.append(item)
    return out
''',
        (
            ("missing_update", "            seen.add(item)\n", ""),
            ("off_by_one", "    return out\n", "    return out[:-1]\n"),
            ("wrong_order", "out.append(item)", "out.insert(0, item)"),
        ),
        ("{fn}([1, 1, 2]) == [1, 2]",),
        (
            "{fn}([3, 1, 3, 2, 1]) == [3, 1, 2]",
            "{fn}([]) == []",
            "{fn}(['b', 'a', 'b']) == ['b', 'a']",
        ),
    ),
    F(
        "fahrenheit",
        ("to_fahrenheit", "celsius_to_fahrenheit", "c_to_f"),
        ("units", "temperature", "convert"),
        "convert degrees Celsius to degrees Fahrenheit",
        '''def {fn}(celsius):
    """Convert degrees Celsius to degrees Fahrenheit."""
    return celsius * 9 / 5 + 32
''',
        (
            ("wrong_constant", "9 / 5", "5 / 9"),
            ("wrong_operator", "+ 32", "- 32"),
            ("off_by_one", "celsius * 9", "(celsius + 1) * 9"),
        ),
        ("abs({fn}(100) - 212) < 1e-9",),
        ("abs({fn}(0) - 32) < 1e-9", "abs({fn}(-40) + 40) < 1e-9", "abs({fn}(37) - 98.6) < 1e-9"),
    ),
    F(
        "chunk",
        ("chunk", "batched", "split_into_chunks"),
        ("batching", "paging", "chunks"),
        "split items into consecutive lists of length size (the last may be shorter); "
        "raise ValueError if size <= 0",
        '''def {fn}(items, size):
    """Split items into lists of length size (the last may be shorter)."""
    if size <= 0:
        raise ValueError("size must be positive")
    return [items[i : i + size] for i in range(0, len(items), size)]
''',
        (
            ("off_by_one", "range(0, len(items), size)", "range(0, len(items) - 1, size)"),
            ("wrong_bounds", "items[i : i + size]", "items[i : i + size - 1]"),
            (
                "wrong_return",
                '        raise ValueError("size must be positive")\n',
                "        return []\n",
            ),
        ),
        ("{fn}([1, 2, 3, 4], 2) == [[1, 2], [3, 4]]",),
        (
            "{fn}([1, 2, 3], 2) == [[1, 2], [3]]",
            "{fn}([], 3) == []",
            "_raises(ValueError, {fn}, [1], 0)",
            "{fn}([1, 2, 3], 1) == [[1], [2], [3]]",
        ),
    ),
    F(
        "merge_sorted",
        ("merge_sorted", "merge_lists", "sorted_merge"),
        ("merging", "sorting", "mergeutil"),
        "merge two sorted lists into one sorted list",
        '''def {fn}(left, right):
    """Merge two sorted lists into one sorted list."""
    out = []
    i = j = 0
    while i < len(left) and j < len(right):
        if left[i] <= right[j]:
            out.append(left[i])
            i += 1
        else:
            out.append(right[j])
            j += 1
    out.extend(left[i:])
    out.extend(right[j:])
    return out
''',
        (
            ("missing_tail", "    out.extend(right[j:])\n", ""),
            ("wrong_comparison", "if left[i] <= right[j]:", "if left[i] >= right[j]:"),
            ("off_by_one", "out.extend(left[i:])", "out.extend(left[i + 1 :])"),
        ),
        ("{fn}([1, 4], [2, 3]) == [1, 2, 3, 4]",),
        (
            "{fn}([1, 2, 9], [3]) == [1, 2, 3, 9]",
            "{fn}([], [1, 2]) == [1, 2]",
            "{fn}([5, 6], []) == [5, 6]",
            "{fn}([1, 3, 5], [2, 4, 6]) == [1, 2, 3, 4, 5, 6]",
        ),
    ),
    F(
        "median",
        ("median", "middle_value", "median_of"),
        ("stats", "summary", "central"),
        "return the median of a non-empty list of numbers; raise ValueError if it is empty",
        '''def {fn}(values):
    """Return the median of a non-empty list of numbers."""
    if not values:
        raise ValueError("median of an empty list")
    ordered = sorted(values)
    mid = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[mid]
    return (ordered[mid - 1] + ordered[mid]) / 2
''',
        (
            ("missing_sort", "ordered = sorted(values)", "ordered = list(values)"),
            ("wrong_return", "(ordered[mid - 1] + ordered[mid]) / 2", "ordered[mid]"),
            ("wrong_comparison", "if len(ordered) % 2:", "if not len(ordered) % 2:"),
        ),
        ("{fn}([1, 2, 3]) == 2",),
        (
            "{fn}([3, 1, 2]) == 2",
            "{fn}([1, 2, 3, 4]) == 2.5",
            "_raises(ValueError, {fn}, [])",
            "{fn}([9, 1]) == 5",
        ),
    ),
    F(
        "caesar",
        ("caesar", "shift_cipher", "caesar_encode"),
        ("cipher", "crypto_toy", "encoding"),
        "shift each ASCII letter of text by shift places (wrapping, keeping case); "
        "other characters unchanged",
        '''def {fn}(text, shift):
    """Shift each ASCII letter by shift places, wrapping and keeping case."""
    out = []
    for c in text:
        if c.isalpha() and c.isascii():
            base = ord("A") if c.isupper() else ord("a")
            out.append(chr((ord(c) - base + shift) % 26 + base))
        else:
            out.append(c)
    return "".join(out)
''',
        (
            ("wrong_constant", "% 26", "% 25"),
            ("wrong_case", 'ord("A") if c.isupper() else ord("a")', 'ord("a")'),
            ("missing_branch", "            out.append(c)\n", "            pass\n"),
        ),
        ("{fn}('abc', 1) == 'bcd'",),
        (
            "{fn}('xyz', 3) == 'abc'",
            "{fn}('Hello, World', 1) == 'Ifmmp, Xpsme'",
            "{fn}('a b', 2) == 'c d'",
        ),
    ),
    F(
        "is_prime",
        ("is_prime", "prime_check", "isprime"),
        ("primes", "sieve", "numtheory"),
        "return True if n is a prime number",
        '''def {fn}(n):
    """Return True if n is a prime number."""
    if n < 2:
        return False
    i = 2
    while i * i <= n:
        if n % i == 0:
            return False
        i += 1
    return True
''',
        (
            ("off_by_one", "while i * i <= n:", "while i * i < n:"),
            ("wrong_comparison", "if n < 2:", "if n < 1:"),
            ("wrong_initial_value", "    i = 2\n", "    i = 3\n"),
        ),
        ("{fn}(7) is True",),
        (
            "{fn}(9) is False",
            "{fn}(1) is False",
            "{fn}(4) is False",
            "{fn}(2) is True",
            "{fn}(25) is False",
        ),
    ),
    F(
        "digit_sum",
        ("digit_sum", "sum_digits", "digits_total"),
        ("digits", "numerals", "intops"),
        "return the sum of the decimal digits of the integer n (sign ignored)",
        '''def {fn}(n):
    """Return the sum of the decimal digits of n (sign ignored)."""
    n = abs(n)
    total = 0
    while n:
        total += n % 10
        n //= 10
    return total
''',
        (
            ("wrong_constant", "total += n % 10", "total += n % 9"),
            ("wrong_operator", "n //= 10", "n //= 100"),
            ("wrong_initial_value", "total = 0", "total = 1"),
        ),
        ("{fn}(123) == 6",),
        ("{fn}(-45) == 9", "{fn}(0) == 0", "{fn}(9999) == 36", "{fn}(109) == 10"),
    ),
    F(
        "reverse_words",
        ("reverse_words", "words_reversed", "flip_words"),
        ("sentences", "phrases", "wordplay"),
        "return the words of sentence in reverse order, separated by single spaces",
        '''def {fn}(sentence):
    """Return the words of sentence in reverse order, joined by single spaces."""
    return " ".join(reversed(sentence.split()))
''',
        (
            ("missing_reverse", "reversed(sentence.split())", "sentence.split()"),
            ("wrong_split", "sentence.split()", 'sentence.split(" ")'),
            ("wrong_join", '" ".join', '"".join'),
        ),
        ("{fn}('a b c') == 'c b a'",),
        ("{fn}('hello   world') == 'world hello'", "{fn}('one') == 'one'", "{fn}('') == ''"),
    ),
    F(
        "title_case",
        ("title_case", "headline", "to_title"),
        ("titles", "formatting", "casing"),
        "capitalise every word except a, an, the, of, and (unless first); other letters lowercase",
        '''SMALL_WORDS = {"a", "an", "the", "of", "and"}


def {fn}(text):
    """Capitalise each word except small words (a, an, the, of, and) after the first."""
    words = text.lower().split()
    out = []
    for i, w in enumerate(words):
        out.append(w if i > 0 and w in SMALL_WORDS else w.capitalize())
    return " ".join(out)
''',
        (
            ("wrong_condition", "i > 0 and w in SMALL_WORDS", "w in SMALL_WORDS"),
            ("missing_normalisation", "text.lower().split()", "text.split()"),
            ("wrong_call", "w.capitalize()", "w.upper()"),
        ),
        ("{fn}('war and peace') == 'War and Peace'",),
        (
            "{fn}('the lord of the rings') == 'The Lord of the Rings'",
            "{fn}('HELLO WORLD') == 'Hello World'",
            "{fn}('war AND peace') == 'War and Peace'",
            "{fn}('a tale') == 'A Tale'",
        ),
    ),
    F(
        "average",
        ("average", "mean", "arithmetic_mean"),
        ("averages", "metrics", "aggregates"),
        "return the arithmetic mean of a non-empty list; raise ValueError if it is empty",
        '''def {fn}(values):
    """Return the arithmetic mean of a non-empty list."""
    if not values:
        raise ValueError("average of an empty list")
    return sum(values) / len(values)
''',
        (
            ("off_by_one", "/ len(values)", "/ (len(values) + 1)"),
            ("wrong_bounds", "sum(values)", "sum(values[1:])"),
            (
                "wrong_return",
                '        raise ValueError("average of an empty list")\n',
                "        return 0\n",
            ),
        ),
        ("{fn}([2, 4]) == 3",),
        ("{fn}([5]) == 5", "{fn}([1, 2, 3, 4]) == 2.5", "_raises(ValueError, {fn}, [])"),
    ),
)
