"""Text analysis for the TF-IDF index: Terrier-style tokenisation, an English stopword list, Porter stemming.

The pipeline mirrors Terrier's default ``Stopwords,PorterStemmer`` term pipeline: split into alphanumeric
runs, lowercase, drop noisy tokens (the checks of Terrier's ``EnglishTokeniser``), remove stopwords, stem. The
default stopword list is Lucene's 33 function words rather than the longer Terrier-lineage list, which drops
content words ("system", "fire", "bill"); the lists are compared in docs/tfidf.md.

>>> Analyzer().terms("The Witcher's silver swords were forged in 1262!")
['witcher', 's', 'silver', 'sword', 'were', 'forg', '1262']
>>> Analyzer(stopwords="glasgow").terms("The Witcher's silver swords were forged in 1262!")
['witcher', 's', 'silver', 'sword', 'forg', '1262']
>>> Analyzer(stemmer=None, stopwords=False).terms("The Witcher's swords")
['the', 'witcher', 's', 'swords']
"""
from __future__ import annotations

import re
from typing import List, Optional, Union

#: The English stopword list of the Glasgow IR group (the group that develops Terrier; scikit-learn ships the
#: same 318 words as ENGLISH_STOP_WORDS). Terrier's own default list extends it.
STOPWORDS = frozenset("""
a about above across after afterwards again against all almost alone along already also although always am among
amongst amoungst amount an and another any anyhow anyone anything anyway anywhere are around as at back be
became because become becomes becoming been before beforehand behind being below beside besides between beyond
bill both bottom but by call can cannot cant co con could couldnt cry de describe detail do done down due during
each eg eight either eleven else elsewhere empty enough etc even ever every everyone everything everywhere
except few fifteen fifty fill find fire first five for former formerly forty found four from front full further
get give go had has hasnt have he hence her here hereafter hereby herein hereupon hers herself him himself his
how however hundred i ie if in inc indeed interest into is it its itself keep last latter latterly least less
ltd made many may me meanwhile might mill mine more moreover most mostly move much must my myself name namely
neither never nevertheless next nine no nobody none noone nor not nothing now nowhere of off often on once one
only onto or other others otherwise our ours ourselves out over own part per perhaps please put rather re same
see seem seemed seeming seems serious several she should show side since sincere six sixty so some somehow
someone something sometime sometimes somewhere still such system take ten than that the their them themselves
then thence there thereafter thereby therefore therein thereupon these they thick thin third this those though
three through throughout thru thus to together too top toward towards twelve twenty two un under until up upon
us very via was we well were what whatever when whence whenever where whereafter whereas whereby wherein
whereupon wherever whether which while whither who whoever whole whom whose why will with within without would
yet you your yours yourself yourselves
""".split())  # noqa: SIM905 (a long word list reads best as text)

#: The 33 English stopwords of Lucene's ``EnglishAnalyzer`` (and Elasticsearch's ``_english_``): function words
#: only, so content words that longer lists drop ("system", "fire", "bill", "show", "found", "part", "name",
#: "move", "side", "top", "interest", ...) stay searchable.
LUCENE_STOPWORDS = frozenset("""
a an and are as at be but by for if in into is it no not of on or such that the their then there these they this
to was will with
""".split())  # noqa: SIM905 (a long word list reads best as text)

#: stopword lists by name (``TfidfConfig.stopwords``); measured against each other in docs/tfidf.md
STOPWORD_LISTS = {"glasgow": STOPWORDS, "lucene": LUCENE_STOPWORDS, "none": frozenset()}


def stopword_list(name) -> frozenset:
    """The stopwords called ``name``; ``True``/``False`` (older index settings) mean ``"glasgow"``/``"none"``.

    >>> sorted(stopword_list("lucene"))[:4], "system" in stopword_list("glasgow"), len(stopword_list(False))
    (['a', 'an', 'and', 'are'], True, 0)
    """
    if name is True or name is False:
        name = "glasgow" if name else "none"
    if name not in STOPWORD_LISTS:
        raise ValueError(f"stopwords={name!r} is not a stopword list; expected one of {sorted(STOPWORD_LISTS)} "
                         "(or True/False for 'glasgow'/'none')")
    return STOPWORD_LISTS[name]


#: token patterns: "unicode" keeps letters and digits of any script (Fandom names such as "Héloïse");
#: "english" is Terrier's EnglishTokeniser (A-Z, a-z, 0-9 only; any other character splits a token)
TOKENISERS = {"unicode": re.compile(r"[^\W_]+"), "english": re.compile(r"[A-Za-z0-9]+")}
_REPEATS = re.compile(r"(.)\1{3}")  # four or more identical characters in a row

#: Terrier's EnglishTokeniser checks: longer tokens, tokens with more digits, or with more repeats are dropped
MAX_TERM_LENGTH = 20
MAX_DIGITS = 4


def keep_token(token: str) -> bool:
    """Terrier's noise checks for one lowercased token.

    >>> [keep_token(t) for t in ["dragon", "12345", "2011", "zzzz", "aaa", "x" * 21]]
    [True, False, True, False, True, False]
    """
    if len(token) > MAX_TERM_LENGTH:
        return False
    if sum(c.isdigit() for c in token) > MAX_DIGITS:
        return False
    return _REPEATS.search(token) is None


def tokenise(text: str, tokeniser: str = "unicode") -> List[str]:
    """Lowercased alphanumeric runs that pass :func:`keep_token`.

    >>> tokenise("Héloïse met Geralt in 1272.")
    ['héloïse', 'met', 'geralt', 'in', '1272']
    >>> tokenise("Héloïse", tokeniser="english")
    ['h', 'lo', 'se']
    """
    return [t for t in TOKENISERS[tokeniser].findall(text.lower()) if keep_token(t)]


class Analyzer:
    """Turns text into index terms; documents and queries go through the same instance.

    >>> Analyzer().terms("Harry's owls are as fast as hawks")
    ['harri', 's', 'owl', 'fast', 'hawk']

    ``stemmer``: a PyStemmer algorithm name (``"porter"``: Porter's original algorithm, as in Terrier) or
    ``None``; ``stopwords``: the name of a list in :data:`STOPWORD_LISTS` (``True``/``False``: "glasgow"/"none"),
    removed before stemming, as Terrier does.
    """

    def __init__(self, stemmer: Optional[str] = "porter", stopwords: Union[bool, str] = "lucene",
                 tokeniser: str = "unicode"):
        if tokeniser not in TOKENISERS:
            raise ValueError(f"tokeniser={tokeniser!r} is not supported; expected one of {sorted(TOKENISERS)}")
        self._stem = None
        if stemmer is not None:
            import Stemmer

            if stemmer not in Stemmer.algorithms():
                raise ValueError(f"stemmer={stemmer!r} is not a PyStemmer algorithm; expected None or one of "
                                 f"{Stemmer.algorithms()}")
            self._stem = Stemmer.Stemmer(stemmer).stemWords
        self._stopwords = stopword_list(stopwords)
        self._tokeniser = tokeniser

    def terms(self, text: str) -> List[str]:
        """Index terms of ``text`` in order (repeats kept: their count is the term frequency)."""
        tokens = [t for t in tokenise(text, self._tokeniser) if t not in self._stopwords]
        if self._stem is None:
            return tokens
        # like Porter's reference implementation (and Terrier's port), words of one or two letters are left
        # as they are; Snowball's "porter" would turn "s" into ""
        stems = self._stem(tokens)
        return [t if len(t) <= 2 else s for t, s in zip(tokens, stems)]
