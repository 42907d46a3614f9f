/** User reads: the public card `{id, nickName, icon}` and the profile of tb_user_info. */
import type { Deps } from "../deps.ts";
import type { SessionUser } from "./session.ts";

export interface UserProfile {
  userId: number;
  city: string;
  introduce: string | null;
  fans: number;
  followee: number;
  gender: number;
  birthday: string | null;
  credits: number;
  level: number;
}

export async function getUserCard(deps: Deps, id: number): Promise<SessionUser | null> {
  const row = (await deps.db.execute("SELECT id, nick_name, icon FROM tb_user WHERE id = ?", [id])).rows[0] as
    | { id: string; nick_name: string; icon: string }
    | undefined;
  return row ? { id: Number(row.id), nickName: row.nick_name, icon: row.icon } : null;
}

export async function getUserProfile(deps: Deps, id: number): Promise<UserProfile | null> {
  const row = (
    await deps.db.execute(
      "SELECT user_id, city, introduce, fans, followee, gender, birthday, credits, level FROM tb_user_info WHERE user_id = ?",
      [id],
    )
  ).rows[0] as Record<string, string | number | null> | undefined;
  if (!row) return null;
  return {
    userId: Number(row.user_id),
    city: String(row.city ?? ""),
    introduce: row.introduce === null ? null : String(row.introduce),
    fans: Number(row.fans),
    followee: Number(row.followee),
    gender: Number(row.gender),
    birthday: row.birthday === null ? null : String(row.birthday),
    credits: Number(row.credits),
    level: Number(row.level),
  };
}
