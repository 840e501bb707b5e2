"""Whether the user's last message asks to forget or to correct a memory.

Forgetting and correcting are the user's decisions, never the model's own: the memory tools
refuse a call that no request in the user's last message backs. The word lists are cheap
stems in a few common languages; text is case-folded and stripped of accents first, so
"Lösche", "olvídate" and "OUBLIE" match like "losche", "olvidate" and "oublie".
"""

from __future__ import annotations

import re
import unicodedata

from navi_desktop.memory.textproc import STOPWORDS, tokens

EVIDENCE_CHARS = 200  # the part of the user's message kept as a correction's evidence


def fold(text: str) -> str:
    """Case-folded, accents dropped, one space between words, typographic apostrophes plain."""
    text = unicodedata.normalize("NFKD", unicodedata.normalize("NFKC", text).casefold())
    text = "".join(ch for ch in text if not unicodedata.combining(ch))
    return " ".join(text.replace("\u2019", "'").split())


def _pattern(words: str, scripts: str = "") -> re.Pattern[str]:
    """Stems that start a word (Latin, Cyrillic), or fragments found anywhere (CJK, Hangul)."""
    stems = "|".join(fold(w).replace(" ", r"\s+") for w in words.split(","))
    anywhere = "|".join(re.escape(fold(w)) for w in scripts.split()) if scripts else ""
    return re.compile(rf"(?<!\w)(?:{stems})" + (f"|{anywhere}" if anywhere else ""))


_FORGET = _pattern(
    # English, French, Spanish, German, Italian, Portuguese, Dutch, Russian
    "forget,delete,remove,erase,wipe,purge,unlearn,drop (it|that|this|my),get rid of,"
    "stop remembering,oubli,supprim,effac,enlev,olvid,borra\\b,borrar,borre\\b,elimin,quita,"
    "vergiss,vergessen,losch,entfern,dimentic,cancell,rimuov,esquec,apag,remov,exclu,"
    "vergeet,verwijder,wis\\b,забуд,удали,сотри",
    "忘记 忘記 忘掉 删除 刪除 删掉 忘れて 削除 消して 잊어 삭제 지워",
)
# "Don't forget my birthday" asks to keep, not to forget.
_NOT_FORGET = re.compile(
    r"(?<!\w)(?:don'?t|do not|never|won'?t|not|no|non|nao)\s+(?:\w+\s+)?"
    r"(?:forget|olvid|esquec|dimentic)\w*"
    r"|(?<!\w)n'oubli\w*\s+pas|(?<!\w)vergiss\w*\s+(?:\w+\s+)?nicht|(?<!\w)не\s+забуд\w*"
    r"|别忘|不要忘"
)
_CORRECT = _pattern(
    "correct,update,chang,fix,edit\\b,modif,replac,wrong,incorrect,mistake,mistaken,not true,"
    "no longer,not anymore,anymore,actually,moved,switched,instead,outdated,"
    "corrig,mets a jour,mettre a jour,mise a jour,remplac,faux,erreur,en fait,demenag,desormais,"
    "actualiz,cambi,reemplaz,ya no,equivoc,error,en realidad,me mude,mudad,mudei,mudou,"
    "korrigier,aktualisier,falsch,nicht mehr,umgezogen,eigentlich,stattdessen,geandert,"
    "corregg,aggiorn,sbagliat,non piu,in realta,trasferit,atualiz,alter,errad,nao mais,"
    "na verdade,verander,wijzig,aanpass,verhuisd,niet meer,eigenlijk,fout\\b,"
    "исправ,обнов,измен,уже не,переехал,неправ",
    "更正 改成 改为 改為 更新 修改 不对 不對 搬到 搬家 不再 訂正 修正 変更 違う 引っ越 間違"
    " 수정 바꿔 변경 업데이트 이사 틀렸",
)


def asks_to_forget(message: str) -> bool:
    """The message asks to forget, delete or remove something."""
    return bool(_FORGET.search(_NOT_FORGET.sub(" ", fold(message))))


def states_value(message: str, value: str) -> bool:
    """The message says ``value`` (every content word of it), and is not a question: "I moved
    to Porto" states Porto, "What is the weather in Porto?" does not."""
    if message.rstrip().endswith(("?", "\uff1f")):
        return False
    wanted = [t for t in tokens(fold(value)) if t not in STOPWORDS] or tokens(fold(value))
    said = set(tokens(fold(message)))
    return bool(wanted) and all(t in said for t in wanted)


def asks_to_correct(message: str, value: str) -> bool:
    """The message asks to change or correct something, or states the new value itself."""
    return bool(_CORRECT.search(fold(message))) or states_value(message, value)


def evidence_for(message: str, value: str) -> str:
    """The user's own words behind a correction: the sentence that states ``value`` (else the
    message's start), at most EVIDENCE_CHARS long."""
    sentences = [s.strip() for s in re.split(r"(?<=[.!?\u3002\uff01\uff1f])\s+|\n+", message)]
    chosen = next((s for s in sentences if s and states_value(s, value)), message.strip())
    if len(chosen) <= EVIDENCE_CHARS:
        return chosen
    return chosen[: EVIDENCE_CHARS - 1].rsplit(" ", 1)[0] + "…"
