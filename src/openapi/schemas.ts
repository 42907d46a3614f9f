/**
 * Shapes of `data` in the reference, for the routes whose answer a client reads field by field.
 * Documentation only (nothing parses with them): they mirror the service types named on each
 * (src/services), with dates as `YYYY-MM-DDTHH:mm:ss` in the service zone.
 */
import { z } from "zod";

const DateTime = z.string().describe("YYYY-MM-DDTHH:mm:ss in the service's time zone");

/** services/session.ts SessionUser, also the user card of likes and common follows. */
export const UserCard = z.object({ id: z.number().int(), nickName: z.string(), icon: z.string() });

/** services/shops.ts Shop. */
export const Shop = z.object({
  id: z.number().int(),
  name: z.string(),
  typeId: z.number().int(),
  images: z.string().describe("comma-separated image URLs"),
  area: z.string().nullable(),
  address: z.string(),
  x: z.number(),
  y: z.number(),
  avgPrice: z.number().int().nullable(),
  sold: z.number().int(),
  comments: z.number().int(),
  score: z.number().int().describe("10 × the star rating"),
  openHours: z.string().nullable(),
  createTime: DateTime,
  updateTime: DateTime,
  distance: z.number().optional().describe("only in nearby results: metres from x/y"),
});

/** services/shops.ts ShopType. */
export const ShopType = z.object({ id: z.number().int(), name: z.string(), icon: z.string(), sort: z.number().int() });

/** services/shops.ts Voucher; seckill ones (`type` 1) carry stock and their sale window. */
export const Voucher = z.object({
  id: z.number().int(),
  shopId: z.number().int(),
  title: z.string(),
  subTitle: z.string().nullable(),
  rules: z.string().nullable(),
  payValue: z.number().int().describe("cents"),
  actualValue: z.number().int().describe("cents"),
  type: z.number().int().describe("0 normal, 1 seckill"),
  status: z.number().int(),
  stock: z.number().int().optional(),
  beginTime: DateTime.optional(),
  endTime: DateTime.optional(),
});

/** routes/voucher-order.ts `present`. */
export const Order = z.object({
  id: z.string().describe("64-bit order id, as a decimal string"),
  userId: z.number().int(),
  voucherId: z.number().int(),
  status: z.enum(["queued", "unpaid", "paid", "cancelled", "refunding", "refunded"]),
  createTime: DateTime,
  payTime: DateTime.nullable(),
});

/** services/blog.ts Blog. */
export const Blog = z.object({
  id: z.number().int(),
  shopId: z.number().int(),
  userId: z.number().int(),
  title: z.string(),
  images: z.string().describe("comma-separated image paths, at most 9"),
  content: z.string(),
  liked: z.number().int(),
  comments: z.number().int(),
  createTime: DateTime,
  updateTime: DateTime,
  name: z.string().describe("author's nickname"),
  icon: z.string().describe("author's icon"),
  isLike: z.boolean().describe("whether the caller likes it (false when anonymous)"),
});

/** services/feed.ts FeedPage: the scroll cursor for the next page with the notes. */
export const FeedPage = z.object({ list: z.array(Blog), minTime: z.number().int(), offset: z.number().int() });

export const OrderIdText = z.string().describe("64-bit order id, as a decimal string");
export const NumericId = z.number().int().describe("id of the created row");
